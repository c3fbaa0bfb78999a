package localenv

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// startEtcd starts the one etcd shared by all kube-apiservers (each under its
// own --etcd-prefix). Plain HTTP is fine: it listens on 127.0.0.1 only.
func (e *Env) startEtcd(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		clientPort, err := freePort("127.0.0.1")
		if err != nil {
			return err
		}
		peerPort, err := freePort("127.0.0.1")
		if err != nil {
			return err
		}
		clientURL := "http://" + hostPort("127.0.0.1", clientPort)
		peerURL := "http://" + hostPort("127.0.0.1", peerPort)
		p, err := e.start("etcd", "etcd",
			"--name=localenv",
			"--data-dir="+filepath.Join(e.StateDir, "etcd"),
			"--listen-client-urls="+clientURL,
			"--advertise-client-urls="+clientURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=localenv="+peerURL,
			// Throwaway data: skipping fsync keeps the shared 2-core machine responsive.
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
		err = waitReady(ctx, p, "etcd", func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, clientURL+"/health")
		})
		if err != nil && p.addrInUse() && attempt < 3 {
			continue
		}
		if err != nil {
			return err
		}
		e.Etcd, e.EtcdURL = p, clientURL
		return nil
	}
}

// waitReady polls check until it succeeds, the process exits, or ctx ends.
func waitReady(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.Done():
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last error: %v); see %s:\n%s", what, last, p.LogPath, p.LogTail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
