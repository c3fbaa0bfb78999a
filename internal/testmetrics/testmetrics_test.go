package testmetrics

import (
	"strings"
	"testing"
)

const text = `# HELP requests_total Requests.
# TYPE requests_total counter
requests_total{kind="request",code="200"} 3
requests_total{code="503",kind="request"} 1
# TYPE open gauge
open 2
# TYPE dial_seconds histogram
dial_seconds_bucket{le="0.5"} 4
dial_seconds_bucket{le="+Inf"} 5
dial_seconds_sum 1.5
dial_seconds_count 5
# TYPE odd counter
odd{path="a\"b\\c"} 1
`

func TestParse(t *testing.T) {
	s, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := Samples{
		`requests_total{code="200",kind="request"}`: 3,
		`requests_total{code="503",kind="request"}`: 1,
		`open`:                           2,
		`dial_seconds_bucket{le="0.5"}`:  4,
		`dial_seconds_bucket{le="+Inf"}`: 5,
		`dial_seconds_sum`:               1.5,
		`dial_seconds_count`:             5,
		`odd{path="a\"b\\c"}`:            1,
	}
	for k, v := range want {
		if got, ok := s[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(s) != len(want) {
		t.Errorf("parsed %d samples, want %d: %v", len(s), len(want), s)
	}
	if got := s.Sum("requests_total"); got != 4 {
		t.Errorf("Sum(requests_total) = %v, want 4", got)
	}
	if !s.Has("requests_total") || !s.Has("open") || s.Has("requests") {
		t.Error("Has does not match whole metric names")
	}
	if _, err := Parse(strings.NewReader("not metrics at all {")); err == nil {
		t.Error("garbage parsed without an error")
	}
}
