package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// pprofTop reads a real CPU profile with the go command's pprof: its rows
// and total, without the header lines that name the file and build.
func TestPprofTopOfARealProfile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	top, err := pprofTop(context.Background(), goBin, "-nodecount=3", path)
	if err != nil {
		t.Fatalf("pprofTop: %v (%d iterations)", err, x)
	}
	for _, want := range []string{"Total samples", "flat%", "cum%"} {
		if !strings.Contains(top, want) {
			t.Errorf("pprof's top lacks %q:\n%s", want, top)
		}
	}
	for _, l := range strings.Split(top, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			t.Errorf("pprof's header line %q is kept:\n%s", l, top)
		}
	}
}

// The hub and Konnectivity loads' profiles sit next to the gateway port's,
// each with its heap profiles before and after.
func TestProfilePaths(t *testing.T) {
	for key, want := range map[string]string{"gateway": "d/cpu.pprof", "hub": "d/cpu-hub.pprof", "konn": "d/cpu-konn.pprof", "direct": ""} {
		if got := profilePath("d/cpu.pprof", key); got != want {
			t.Errorf("profilePath(%q) = %q, want %q", key, got, want)
		}
	}
	if got := allocPath("d/cpu-hub.pprof", "before"); got != "d/cpu-hub-allocs-before.pprof" {
		t.Errorf("allocPath = %q", got)
	}
	if profilePath("", "gateway") != "" {
		t.Error("a profile without -gateway-profile")
	}
}

// The report lists each profiled load's CPU profile and heap profiles, and
// the CPU profile's top as pprof printed it.
func TestProfileSection(t *testing.T) {
	top := "Duration: 5s, Total samples = 1.20s (24.00%)\n      flat  flat%   sum%        cum   cum%\n     0.12s 10.00% 10.00%      0.12s 10.00%  runtime.memmove"
	r := &report{Profiles: []pathProfile{
		{Key: "gateway", What: "on its own port", Path: "s/gateway-cpu.pprof", Top: top},
		{Key: "hub", What: "behind the hub", Path: "s/gateway-cpu-hub.pprof"},
	}}
	out := mustRender(t, "profiles", r)
	for _, want := range []string{
		"Gateway on its own port: `go tool pprof s/gateway-cpu.pprof`; heap profiles `s/gateway-cpu-allocs-before.pprof` and `s/gateway-cpu-allocs-after.pprof`.",
		"```\n" + top + "\n```",
		"Gateway behind the hub: `go tool pprof s/gateway-cpu-hub.pprof`",
		"(pprof could not read it.)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the profile section lacks %q:\n%s", want, out)
		}
	}
}
