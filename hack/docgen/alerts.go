package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// The generated part of docs/metrics.md lies between these lines.
const (
	alertsBegin = "<!-- BEGIN GENERATED ALERTS: make docs writes this from charts/cluster-gateway/files/alerts.yaml -->"
	alertsEnd   = "<!-- END GENERATED ALERTS -->"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertsSection is a table of the alerts: name, for, severity, expression
// and meaning.
func alertsSection(rules []byte, path string) ([]byte, error) {
	var f ruleFile
	if err := yaml.UnmarshalStrict(rules, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var b bytes.Buffer
	fmt.Fprintln(&b, alertsBegin)
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| Alert | For | Severity | Expression | Meaning |")
	fmt.Fprintln(&b, "|---|---|---|---|---|")
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				return nil, fmt.Errorf("%s: group %s: every rule needs alert, expr, labels.severity and annotations.summary: %+v", path, g.Name, r)
			}
			if seen[r.Alert] {
				return nil, fmt.Errorf("%s: alert %s twice", path, r.Alert)
			}
			seen[r.Alert] = true
			meaning := r.Annotations["summary"]
			if d := r.Annotations["description"]; d != "" {
				meaning += " " + d
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s |\n", r.Alert, orDash(r.For), r.Labels["severity"], cell(r.Expr), cell(meaning))
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, alertsEnd)
	return b.Bytes(), nil
}

// replaceSection puts section in place of the lines from alertsBegin to
// alertsEnd.
func replaceSection(doc, section []byte) ([]byte, error) {
	s := string(doc)
	i, j := strings.Index(s, alertsBegin), strings.Index(s, alertsEnd)
	if i < 0 || j < i {
		return nil, errors.New("no generated alerts section: add the lines " + alertsBegin + " and " + alertsEnd)
	}
	rest := strings.TrimPrefix(s[j+len(alertsEnd):], "\n")
	return []byte(s[:i] + string(section) + rest), nil
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(s), "|", `\|`), "\n", " ")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
