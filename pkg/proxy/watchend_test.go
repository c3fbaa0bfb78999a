package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

type cutBody struct{ r io.Reader }

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, errors.New("use of closed network connection")
	}
	return n, err
}
func (b *cutBody) Close() error { return nil }

type fixedRT struct{ body string }

func (f fixedRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: &cutBody{strings.NewReader(f.body)}}, nil
}

// A cut upstream ends the watch with EOF after every byte that arrived,
// unless the client is gone.
func TestCleanEndTurnsACutIntoEOF(t *testing.T) {
	const events = `{"type":"ADDED"}` + "\n"
	req, _ := http.NewRequest(http.MethodGet, "https://x/api/v1/configmaps?watch=true", nil)
	resp, err := cleanEnd{RoundTripper: fixedRT{events}}.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != events {
		t.Fatalf("read %q, %v; want %q and a clean EOF", got, err, events)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, _ = cleanEnd{RoundTripper: fixedRT{events}}.RoundTrip(req.WithContext(ctx))
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a cut seen after the client left must keep its error")
	}
}

func TestIsWatch(t *testing.T) {
	for path, want := range map[string]bool{
		"/api/v1/namespaces/x/configmaps?watch=true":  true,
		"/api/v1/watch/namespaces/x/configmaps":       true,
		"/api/v1/namespaces/x/configmaps":             false,
		"/api/v1/namespaces/x/pods/p/log?follow=true": false,
	} {
		p, q, _ := strings.Cut(path, "?")
		req, _ := http.NewRequest(http.MethodGet, "https://hub/whatever?"+q, nil)
		in, _ := innerInfo(req, p)
		if got := isWatch(in); got != want {
			t.Errorf("isWatch(%s) = %v, want %v", path, got, want)
		}
	}
}
