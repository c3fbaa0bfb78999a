// Command docgen writes the documentation that is generated from the code,
// so it cannot drift from it: docs/flags.md from the flag sets of
// cluster-gateway and kubectl-cgw, and the "Alerts" section of
// docs/metrics.md from the chart's alert rules. `make docs` runs it from
// the repository root; `make verify` runs it and fails on a diff.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	flagsOut := flag.String("flags", "docs/flags.md", "where to write the flag reference")
	alerts := flag.String("alerts", "charts/cluster-gateway/files/alerts.yaml", "the chart's alert rules")
	metrics := flag.String("metrics", "docs/metrics.md", "the metrics documentation whose Alerts section is written from -alerts")
	flag.Parse()
	if err := run(*flagsOut, *alerts, *metrics); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(flagsOut, alerts, metrics string) error {
	ref, err := flagReference()
	if err != nil {
		return err
	}
	if err := writeIfChanged(flagsOut, ref); err != nil {
		return err
	}
	rules, err := os.ReadFile(alerts)
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(metrics)
	if err != nil {
		return err
	}
	section, err := alertsSection(rules, alerts)
	if err != nil {
		return err
	}
	updated, err := replaceSection(doc, section)
	if err != nil {
		return fmt.Errorf("%s: %w", metrics, err)
	}
	return writeIfChanged(metrics, updated)
}

// writeIfChanged leaves a file that is already current untouched (its
// modification time too).
func writeIfChanged(path string, content []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return nil
	}
	return os.WriteFile(path, content, 0o644)
}
