package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// krewPlugin is what the test reads of a krew manifest
// (krew.googlecontainertools.github.com/v1alpha2 Plugin).
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

func readPlugin(t *testing.T, path string) krewPlugin {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(b, &p, yaml.DisallowUnknownFields); err != nil {
		// Unknown fields are fine (description, caveats, homepage): read again without strictness.
		if err := yaml.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "cgw" || p.Spec.ShortDescription == "" {
		t.Errorf("%s: apiVersion %q kind %q name %q shortDescription %q; want a krew v1alpha2 Plugin named cgw (the file is cgw.yaml)",
			path, p.APIVersion, p.Kind, p.Metadata.Name, p.Spec.ShortDescription)
	}
	return p
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// untar returns the archive's files by name, with their modes.
func untar(t *testing.T, path string) (map[string][]byte, map[string]int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files, modes := map[string][]byte{}, map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = b, h.Mode
	}
	return files, modes
}

// The release of kubectl-cgw for this machine's platform (the gateway's
// archive is made by the same code, and its build is the slow one): an
// archive with LICENSE and the binary stamped with the version;
// sha256sums.txt and the krew manifest's sha256 are the archive's own; a
// second run writes the same bytes.
func TestReleaseOnePlatform(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	out := t.TempDir()
	c := config{
		Version: "v0.3.0-rc.1", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-11-01T10:00:00Z",
		Out: out, Root: filepath.Join("..", ".."), KrewTemplate: filepath.Join("..", "krew", "cgw.yaml.tmpl"),
		URL: "https://downloads.example/v0.3.0-rc.1/", Go: "go", Only: []string{platform}, Binaries: []string{"kubectl-cgw"},
	}
	goos, goarch, _ := strings.Cut(platform, "/")
	want := map[string]string{} // archive -> binary
	for _, b := range binaries {
		for _, p := range b.Platforms {
			if p == platform && b.Name == "kubectl-cgw" {
				want[b.Name+"_v0.3.0-rc.1_"+goos+"_"+goarch+".tar.gz"] = b.Name
			}
		}
	}
	if len(want) == 0 {
		t.Fatalf("nothing ships for %s, where this test runs: run it on linux or darwin", platform)
	}
	// Builds end before the test's deadline, so a slow machine fails the
	// test instead of leaving go build running.
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	var log bytes.Buffer
	if err := run(ctx, c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	license, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	b, err := os.ReadFile(filepath.Join(out, "sha256sums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("sha256sums.txt line %q: want `<sha256>  <file>` (sha256sum -c)", line)
		}
		sums[file] = sum
	}
	if len(sums) != len(want) {
		t.Errorf("sha256sums.txt lists %v, want the archives %v", sums, want)
	}
	for file, bin := range want {
		path := filepath.Join(out, file)
		if got := sha256File(t, path); sums[file] != got {
			t.Errorf("sha256sums.txt says %s for %s; the file's is %s", sums[file], file, got)
		}
		files, modes := untar(t, path)
		if len(files) != 2 || !bytes.Equal(files["LICENSE"], license) || modes[bin] != 0o755 {
			t.Errorf("%s holds %d files (modes %v), want %s (0755) and the repository's LICENSE", file, len(files), modes, bin)
		}
		// The binary runs here and says its version.
		exe := filepath.Join(t.TempDir(), bin)
		if err := os.WriteFile(exe, files[bin], 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := exec.Command(exe, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), "v0.3.0-rc.1") {
			t.Errorf("%s --version: %q, %v; want it stamped v0.3.0-rc.1", bin, v, err)
		}
	}

	plugin := readPlugin(t, filepath.Join(out, "cgw.yaml"))
	if plugin.Spec.Version != "v0.3.0-rc.1" || len(plugin.Spec.Platforms) != 1 {
		t.Fatalf("cgw.yaml: version %q, %d platforms; want v0.3.0-rc.1 and the one built", plugin.Spec.Version, len(plugin.Spec.Platforms))
	}
	p := plugin.Spec.Platforms[0]
	file := "kubectl-cgw_v0.3.0-rc.1_" + goos + "_" + goarch + ".tar.gz"
	if p.SHA256 != sha256File(t, filepath.Join(out, file)) {
		t.Errorf("cgw.yaml sha256 %s is not the sha256 of %s", p.SHA256, file)
	}
	if p.URI != "https://downloads.example/v0.3.0-rc.1/"+file || p.Bin != "kubectl-cgw" ||
		!reflect.DeepEqual(p.Selector.MatchLabels, map[string]string{"os": goos, "arch": goarch}) {
		t.Errorf("cgw.yaml platform %+v: want uri .../%s, bin kubectl-cgw, selector os=%s arch=%s", p, file, goos, goarch)
	}
	files, _ := untar(t, filepath.Join(out, file))
	for _, f := range p.Files {
		if _, ok := files[f.From]; !ok {
			t.Errorf("cgw.yaml extracts %s, which %s does not hold", f.From, file)
		}
	}

	// Reproducible: the same inputs give the same archives.
	first := sums
	c.Out = t.TempDir()
	if err := run(ctx, c, &log); err != nil {
		t.Fatal(err)
	}
	for file, sum := range first {
		if got := sha256File(t, filepath.Join(c.Out, file)); got != sum {
			t.Errorf("%s: sha256 %s on a second run, %s on the first", file, got, sum)
		}
	}
}

// The manifest of a whole release: one entry per kubectl-cgw platform, each
// with its archive's sha256.
func TestKrewManifestAllPlatforms(t *testing.T) {
	var archives []archive
	for i, p := range binaries[1].Platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		archives = append(archives, archive{Bin: "kubectl-cgw", OS: goos, Arch: goarch,
			File: "a" + p, SHA256: strings.Repeat(string(rune('a'+i)), 64), URI: "https://x/" + goos + "-" + goarch})
	}
	path := filepath.Join(t.TempDir(), "cgw.yaml")
	if err := writeManifest(path, filepath.Join("..", "krew", "cgw.yaml.tmpl"), "v1.2.3", archives); err != nil {
		t.Fatal(err)
	}
	plugin := readPlugin(t, path)
	if len(plugin.Spec.Platforms) != 4 {
		t.Fatalf("%d platforms, want linux and darwin on amd64 and arm64", len(plugin.Spec.Platforms))
	}
	for i, p := range plugin.Spec.Platforms {
		a := archives[i]
		if p.SHA256 != a.SHA256 || p.URI != a.URI || p.Selector.MatchLabels["os"] != a.OS || p.Selector.MatchLabels["arch"] != a.Arch || p.Bin != "kubectl-cgw" {
			t.Errorf("platform %d: %+v, want %+v", i, p, a)
		}
	}
}

func TestReleaseVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.2.0":                  "v0.2.0",
		"v0.2.0-3-gabcdef0-dirty": "v0.2.0-3-gabcdef0-dirty",
		"6bdd936":                 "v0.0.0-dev.g6bdd936",
		"0123456-dirty":           "v0.0.0-dev.g0123456-dirty",
	} {
		if got, err := releaseVersion(in); got != want || err != nil {
			t.Errorf("releaseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "v1", "release one", "v1.2.3+x y", "abc"} {
		if got, err := releaseVersion(bad); err == nil {
			t.Errorf("releaseVersion(%q) = %q, want an error", bad, got)
		}
	}
}
