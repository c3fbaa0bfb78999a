package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// poll tries again after a retry, stops at once on any other error, and
// after its timeout names what it waited for and the last error.
func TestPoll(t *testing.T) {
	ctx := context.Background()
	n := 0
	if _, err := poll(ctx, time.Millisecond, time.Minute, "three tries", func(context.Context) error {
		if n++; n < 3 {
			return retry{errors.New("not yet")}
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("poll: %v after %d calls, want nil after 3", err, n)
	}
	fatal := errors.New("fatal")
	n = 0
	if _, err := poll(ctx, time.Millisecond, time.Minute, "fatal", func(context.Context) error { n++; return fatal }); !errors.Is(err, fatal) || n != 1 {
		t.Fatalf("poll: %v after %d calls, want the fatal error after 1", err, n)
	}
	last := errors.New("still held")
	_, err := poll(ctx, time.Millisecond, 20*time.Millisecond, "the drain", func(context.Context) error { return again(last) })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "the drain") {
		t.Fatalf("poll after its timeout: %v, want it to name the wait and wrap the last error", err)
	}
	if again(nil) != nil {
		t.Fatal("again(nil) is not nil")
	}
}

// sampleMax keeps the most it read, skips failed reads, and counts the reads.
func TestSampleMax(t *testing.T) {
	vals := []float64{3, 9, -1, 4}
	i := 0
	stop := sampleMax(time.Millisecond, func() (float64, error) {
		if i >= len(vals) {
			return 0, errors.New("no more")
		}
		v := vals[i]
		i++
		if v < 0 {
			return 100, errors.New("failed read")
		}
		return v, nil
	})
	time.Sleep(50 * time.Millisecond)
	if most, n := stop(); most != 9 || n != 3 {
		t.Fatalf("sampleMax = %v over %d reads, want 9 over 3", most, n)
	}
}

// A template row spreads a list over as many cells and prints the others.
func TestTableRowSpreadsLists(t *testing.T) {
	tb := newTable("lrrr", "a", "b", "c", "d")
	tb.Row("x", 2, []any{"y", 3.5})
	if got, want := tb.String(), "| a | b | c | d |\n|---|---:|---:|---:|\n| x | 2 | y | 3.5 |\n"; got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// What the bench prints after the Go benchmarks is both of section 1's tables.
func TestGoBenchTablesPrinted(t *testing.T) {
	out, err := render("goBenchTables", fixtureGoBench())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| benchmark | ns/op (median) |", "| ProxyGateway/get | 94.9 µs | 90.2 µs – 113.9 µs | 19937 | 181 |", "| body | gateway / bare proxy (ns/op) |", "| get | 0.85 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the printed tables lack %q:\n%s", want, out)
		}
	}
}
