package localenv

import (
	"fmt"
	"os"
	"strings"
)

// raceMarker starts each report of the race detector (what a gateway built
// with -race writes to its log).
const raceMarker = "WARNING: DATA RACE"

// maxRaceReport bounds how much of one log DataRaces returns.
const maxRaceReport = 20000

// DataRaces returns the race detector's reports in logs, each log's from its
// first report on and under its path, or "" if there are none. A log that
// cannot be read is reported as such: it may have held one.
func DataRaces(logs []string) string {
	var b strings.Builder
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(&b, "--- %s: cannot be scanned for data races: %v\n", path, err)
			continue
		}
		i := strings.Index(string(data), raceMarker)
		if i < 0 {
			continue
		}
		report := string(data[i:])
		if len(report) > maxRaceReport {
			report = report[:maxRaceReport] + "\n..."
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", path, report)
	}
	return b.String()
}

// GatewayLogs lists the log of every gateway process the environment has
// started, the environment's gateway and each replica, once each and in
// the order they were first started. A restarted gateway or replica
// appends to its log (see spawner.start), so a report it wrote before a
// restart is still there.
func (e *Env) GatewayLogs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.gatewayLogs...)
}

// noteGatewayLog adds a gateway process's log to GatewayLogs.
func (e *Env) noteGatewayLog(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.gatewayLogs {
		if p == path {
			return
		}
	}
	e.gatewayLogs = append(e.gatewayLogs, path)
}
