package version

import (
	"runtime/debug"
	"testing"
)

func TestGetFromLinkerFlags(t *testing.T) {
	got := get("v1.2.3-4-gabcdef0-dirty", "abcdef0123", "2026-11-30T00:00:00Z", &debug.BuildInfo{
		Main:     debug.Module{Version: "v9.9.9"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fffffff"}},
	})
	if got.GitVersion != "v1.2.3-4-gabcdef0-dirty" || got.Major != "1" || got.Minor != "2" {
		t.Errorf("version %q major %q minor %q; want the linker's v1.2.3-4-gabcdef0-dirty, 1, 2", got.GitVersion, got.Major, got.Minor)
	}
	if got.GitCommit != "abcdef0123" || got.BuildDate != "2026-11-30T00:00:00Z" || got.GitTreeState != "dirty" {
		t.Errorf("commit %q date %q tree %q; want the linker's values and dirty", got.GitCommit, got.BuildDate, got.GitTreeState)
	}
	if got.GoVersion == "" || got.Platform == "" {
		t.Errorf("GoVersion %q Platform %q: want both set", got.GoVersion, got.Platform)
	}
}

func TestGetFromBuildInfo(t *testing.T) {
	got := get("", "", "", &debug.BuildInfo{
		Main: debug.Module{Version: "v0.3.1"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789"},
			{Key: "vcs.time", Value: "2026-10-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	})
	if got.GitVersion != "v0.3.1" || got.Major != "0" || got.Minor != "3" || got.GitCommit != "0123456789" ||
		got.BuildDate != "2026-10-01T10:00:00Z" || got.GitTreeState != "clean" {
		t.Errorf("got %+v; want v0.3.1 (0, 3) at 0123456789, 2026-10-01T10:00:00Z, clean", got)
	}
}

func TestGetDevelWithoutInfo(t *testing.T) {
	for _, bi := range []*debug.BuildInfo{nil, {Main: debug.Module{Version: "(devel)"}}} {
		if got := get("", "", "", bi); got.GitVersion != unknown || got.Major != "0" || got.GitCommit != "" {
			t.Errorf("build info %+v: got %+v; want %s without a commit", bi, got, unknown)
		}
	}
}

func TestGetBareCommit(t *testing.T) {
	// git describe --always in a repository without tags prints the short commit.
	got := get("404fd10", "404fd10aaaa", "", nil)
	if got.GitVersion != "404fd10" || got.Major != "" || got.GitTreeState != "clean" {
		t.Errorf("got %+v; want GitVersion 404fd10, no major, clean", got)
	}
}
