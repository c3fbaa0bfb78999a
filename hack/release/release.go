package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

type config struct {
	Version, Commit, Date string
	Out, Root             string
	KrewTemplate, URL, Go string
	Only                  []string // os/arch pairs; empty: all
	Binaries              []string // names; empty: all
}

// A binary and the platforms it ships for.
type binary struct {
	Name, Package string
	Platforms     []string
}

var binaries = []binary{
	{"cluster-gateway", "./cmd/apiserver", []string{"linux/amd64", "linux/arm64"}},
	{"kubectl-cgw", "./cmd/kubectl-cgw", []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}},
}

const versionPkg = "github.com/clustergateway/cluster-gateway/pkg/version"

// An archive built for one binary and platform.
type archive struct {
	Bin, OS, Arch string
	File          string // base name in Out
	SHA256        string
	URI           string
}

func run(ctx context.Context, c config, log io.Writer) error {
	version, err := releaseVersion(c.Version)
	if err != nil {
		return err
	}
	date, err := time.Parse(time.RFC3339, c.Date)
	if err != nil {
		return fmt.Errorf("-date %q: want the commit's date, RFC 3339 (git log -1 --format=%%cI): %w", c.Date, err)
	}
	if c.URL == "" {
		c.URL = "https://github.com/clustergateway/cluster-gateway/releases/download/" + version
	}
	license, err := os.ReadFile(filepath.Join(c.Root, "LICENSE"))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(c.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	build, err := os.MkdirTemp("", "release-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(build)

	var archives []archive
	for _, b := range binaries {
		if len(c.Binaries) > 0 && !slices.Contains(c.Binaries, b.Name) {
			continue
		}
		for _, p := range b.Platforms {
			if len(c.Only) > 0 && !slices.Contains(c.Only, p) {
				continue
			}
			goos, goarch, _ := strings.Cut(p, "/")
			exe := filepath.Join(build, goos+"_"+goarch, b.Name)
			fmt.Fprintf(log, "building %s for %s\n", b.Name, p)
			if err := goBuild(ctx, c, version, goos, goarch, b.Package, exe); err != nil {
				return err
			}
			a := archive{Bin: b.Name, OS: goos, Arch: goarch, File: fmt.Sprintf("%s_%s_%s_%s.tar.gz", b.Name, version, goos, goarch)}
			if a.SHA256, err = writeArchive(filepath.Join(c.Out, a.File), exe, license, date); err != nil {
				return err
			}
			a.URI = strings.TrimSuffix(c.URL, "/") + "/" + a.File
			archives = append(archives, a)
		}
	}
	if len(archives) == 0 {
		return fmt.Errorf("-platforms %v, -binaries %v: nothing ships for these", c.Only, c.Binaries)
	}
	if err := writeSums(filepath.Join(c.Out, "sha256sums.txt"), archives); err != nil {
		return err
	}
	var plugin []archive
	for _, a := range archives {
		if a.Bin == "kubectl-cgw" {
			plugin = append(plugin, a)
		}
	}
	if len(plugin) > 0 {
		if err := writeManifest(filepath.Join(c.Out, "cgw.yaml"), c.KrewTemplate, version, plugin); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "release %s in %s: %d archives, sha256sums.txt, cgw.yaml\n", version, c.Out, len(archives))
	return nil
}

// releaseVersion is v as a semantic version (krew requires one): a tag such
// as v0.2.0, or git describe's v0.2.0-3-gabcdef0; a checkout with no tag
// (git describe prints the abbreviated commit) is released as
// v0.0.0-dev.g<commit>.
var untagged = regexp.MustCompile(`^[0-9a-f]{7,40}(-dirty)?$`)

func releaseVersion(v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("-version is required (make release passes git describe's)")
	}
	if strings.HasPrefix(v, "v") {
		if _, err := utilversion.ParseSemantic(v); err == nil {
			return v, nil
		}
	} else if untagged.MatchString(v) {
		return "v0.0.0-dev.g" + v, nil
	}
	return "", fmt.Errorf("version %q is not a semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE]), which krew requires: tag the commit or pass VERSION=v1.2.3", v)
}

func goBuild(ctx context.Context, c config, version, goos, goarch, pkg, out string) error {
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.GitCommit=%s -X %s.BuildDate=%s",
		versionPkg, version, versionPkg, c.Commit, versionPkg, c.Date)
	cmd := exec.CommandContext(ctx, c.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = c.Root
	// Static binaries, as the image's: no libc to match on the target.
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w", pkg, goos, goarch, err)
	}
	return nil
}

// writeArchive writes a .tar.gz of the binary and LICENSE and returns its
// sha256. The same inputs give the same bytes: fixed order, owner, modes and
// times (the commit's date), and no name or time in the gzip header.
func writeArchive(path, exe string, license []byte, date time.Time) (string, error) {
	bin, err := os.ReadFile(exe)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{filepath.Base(exe), 0o755, bin}, {"LICENSE", 0o644, license}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: date.UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeSums writes the archives' checksums in the format `sha256sum -c` reads.
func writeSums(path string, archives []archive) error {
	lines := make([]string, 0, len(archives))
	for _, a := range archives {
		lines = append(lines, a.SHA256+"  "+a.File+"\n")
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
}

func writeManifest(path, tmplPath, version string, platforms []archive) error {
	t, err := template.New(filepath.Base(tmplPath)).Option("missingkey=error").ParseFiles(tmplPath)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, struct {
		Version   string
		Platforms []archive
	}{version, platforms}); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
