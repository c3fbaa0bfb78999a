package main

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
)

// bareStatsPath is where the bare proxy answers with its own Go heap,
// stacks and goroutines (what the gateway's /metrics shows of it), after a garbage
// collection; every other path is proxied.
const bareStatsPath = "/debug/bare-proxy/stats"

// goStats is a Go process's live heap and goroutines.
type goStats struct {
	HeapInuse, StackInuse float64
	Goroutines            float64
}

func withBareStats(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != bareStatsPath {
			h.ServeHTTP(w, r)
			return
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		_ = json.NewEncoder(w).Encode(goStats{HeapInuse: float64(m.HeapInuse), StackInuse: float64(m.StackInuse), Goroutines: float64(runtime.NumGoroutine())})
	})
}

// stats asks the bare proxy for its heap and goroutines.
func (b *bareProxy) stats(ctx context.Context, c *http.Client) (goStats, error) {
	var s goStats
	resp, err := getOK(ctx, c, b.URL+bareStatsPath, "")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
