// Package version is the version of the gateway and the kubectl-cgw binary.
//
// `make build` stamps it from `git describe --tags --always --dirty`:
//
//	go build -ldflags "-X github.com/clustergateway/cluster-gateway/pkg/version.Version=v0.1.0 \
//	  -X github.com/clustergateway/cluster-gateway/pkg/version.GitCommit=<sha> \
//	  -X github.com/clustergateway/cluster-gateway/pkg/version.BuildDate=<RFC 3339>"
//
// Without the flags (`go install ...@v0.1.0`, `go run`), the version comes from
// the module build info that the Go toolchain records in every binary.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

// Set with -ldflags -X; empty means "read the build info".
var (
	// Version is a semantic version with a leading v, e.g. v0.1.0, or what
	// git describe prints (v0.1.0-3-gabcdef0-dirty, or a bare commit).
	Version string
	// GitCommit is the full commit hash the binary was built from.
	GitCommit string
	// BuildDate is when the binary was built (RFC 3339), or the commit's date.
	BuildDate string
)

// unknown is the version of a binary built without the flags and without
// module or VCS information (e.g. `go build` with -buildvcs=false in a checkout).
const unknown = "v0.0.0-unknown"

// Get returns the version in the shape kube-apiserver's /version uses.
func Get() apimachineryversion.Info {
	bi, _ := debug.ReadBuildInfo()
	return get(Version, GitCommit, BuildDate, bi)
}

// String is Get().GitVersion: what --version prints first.
func String() string { return Get().GitVersion }

// get fills Info from the linker flags, falling back to bi for what they left empty.
func get(version, commit, date string, bi *debug.BuildInfo) apimachineryversion.Info {
	treeState := ""
	if bi != nil {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.time":
				if date == "" {
					date = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" {
					treeState = "dirty"
				} else {
					treeState = "clean"
				}
			}
		}
	}
	if version == "" {
		version = unknown
	}
	if treeState == "" && commit != "" {
		treeState = "clean"
		if dirty.MatchString(version) {
			treeState = "dirty"
		}
	}
	major, minor := "", ""
	if m := semver.FindStringSubmatch(version); m != nil {
		major, minor = m[1], m[2]
	}
	return apimachineryversion.Info{
		Major:        major,
		Minor:        minor,
		GitVersion:   version,
		GitCommit:    commit,
		GitTreeState: treeState,
		BuildDate:    date,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     fmt.Sprintf("%s/%s", runtime.GOOS, runtime.GOARCH),
	}
}

var (
	semver = regexp.MustCompile(`^v(\d+)\.(\d+)\.\d+`)
	dirty  = regexp.MustCompile(`-dirty$`)
)
