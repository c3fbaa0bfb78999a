// Command release builds what a release ships, into one directory, and
// publishes nothing: the gateway for linux/amd64 and linux/arm64, kubectl-cgw
// for linux and darwin on amd64 and arm64, each a reproducible .tar.gz with
// the binary and LICENSE; sha256sums.txt over the archives; and cgw.yaml, the
// krew plugin manifest, whose sha256 are those of the kubectl-cgw archives.
// `make release` runs it from hack/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var c config
	flag.StringVar(&c.Version, "version", "", "the version to stamp and release: a semantic version (v1.2.3), or what git describe prints")
	flag.StringVar(&c.Commit, "commit", "", "the commit the binaries are built from")
	flag.StringVar(&c.Date, "date", "", "the commit's date (RFC 3339): build date and the archives' file times")
	flag.StringVar(&c.Out, "out", "../_output/release", "where the archives, sha256sums.txt and cgw.yaml go (emptied first)")
	flag.StringVar(&c.Root, "root", "..", "the repository root (the product module, LICENSE)")
	flag.StringVar(&c.KrewTemplate, "krew-template", "krew/cgw.yaml.tmpl", "the krew manifest's template")
	flag.StringVar(&c.URL, "url", "", "where the archives will be downloaded from (the krew manifest's uri is URL/<archive>); default: the GitHub release of the version")
	flag.StringVar(&c.Go, "go", "go", "the go command")
	platforms := flag.String("platforms", "", "build only these os/arch pairs, comma-separated (default: all)")
	names := flag.String("binaries", "", "build only these of cluster-gateway and kubectl-cgw, comma-separated (default: both)")
	flag.Parse()
	if *platforms != "" {
		c.Only = strings.Split(*platforms, ",")
	}
	if *names != "" {
		c.Binaries = strings.Split(*names, ",")
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
