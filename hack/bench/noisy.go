package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The noisy neighbour runs in a process of its own, as another tenant's
// clients would: in the bench process its goroutines would share a Go
// scheduler with the steady load's client and delay it.

// noisyCounts is what the neighbour saw so far.
type noisyCounts struct {
	OK, TooMany, Other int64
	FirstErr           string
}

// noisyChildFlag makes the bench binary run as the neighbour.
const noisyChildFlag = "isolation-noisy-child"

// noisyChildMain runs workers against -url as the users of -certs/-keys
// until its stdin ends; each line on stdin is answered with the counts as
// one JSON line on stdout.
func noisyChildMain(args []string) error {
	fs := flag.NewFlagSet(noisyChildFlag, flag.ContinueOnError)
	url := fs.String("url", "", "URL every worker GETs")
	caFile := fs.String("ca", "", "CA bundle of the gateway")
	certs := fs.String("certs", "", "comma-separated client certificate files, one client each")
	keys := fs.String("keys", "", "their keys, in the same order")
	workers := fs.Int("workers", 1, "workers, spread over the clients")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs, ks := strings.Split(*certs, ","), strings.Split(*keys, ",")
	if len(cs) != len(ks) || *certs == "" {
		return errors.New("-certs and -keys must list the same number of files")
	}
	var clients []*http.Client
	for i := range cs {
		cfg, err := clientTLS(*caFile, cs[i], ks[i])
		if err != nil {
			return err
		}
		clients = append(clients, &http.Client{Timeout: time.Minute, Transport: clientTransport(cfg)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ok, tooMany, other atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			noisyWorker(ctx, clients[i%len(clients)], *url, &ok, &tooMany, &other, &firstErr)
		}()
	}
	in, out := bufio.NewScanner(os.Stdin), json.NewEncoder(os.Stdout)
	for in.Scan() {
		e, _ := firstErr.Load().(string)
		if err := out.Encode(noisyCounts{OK: ok.Load(), TooMany: tooMany.Load(), Other: other.Load(), FirstErr: e}); err != nil {
			break
		}
	}
	cancel()
	wg.Wait()
	return nil
}

// noisyChild is the running neighbour.
type noisyChild struct {
	*child
	out *bufio.Scanner
}

// startNoisy starts the neighbour: workers GETting url as users.
func startNoisy(ctx context.Context, env *localenv.Env, users []*localenv.User, url string, workers int) (*noisyChild, error) {
	var certs, keys []string
	for _, u := range users {
		certs, keys = append(certs, u.Cert.CertFile), append(keys, u.Cert.KeyFile)
	}
	c, err := startChild(ctx, "the noisy neighbour", noisyChildFlag, "-url", url, "-ca", env.Gateway.CA.CertFile,
		"-certs", strings.Join(certs, ","), "-keys", strings.Join(keys, ","), "-workers", fmt.Sprint(workers))
	if err != nil {
		return nil, err
	}
	return &noisyChild{child: c, out: bufio.NewScanner(c.stdout)}, nil
}

// counts asks the neighbour what it saw so far. A neighbour that does not
// answer within childAnswer is killed by its pid, which ends the read.
func (n *noisyChild) counts() (noisyCounts, error) {
	var c noisyCounts
	if _, err := io.WriteString(n.stdin, "counts\n"); err != nil {
		return c, n.errorf("%v", err)
	}
	t := time.AfterFunc(childAnswer, func() { _ = n.cmd.Process.Kill() })
	defer t.Stop()
	if !n.out.Scan() {
		return c, n.errorf("stopped answering: %v", n.out.Err())
	}
	if err := json.Unmarshal(n.out.Bytes(), &c); err != nil {
		return c, n.errorf("answered %q: %v", n.out.Bytes(), err)
	}
	return c, nil
}
