package pool

import (
	"errors"
	"io"
	"net/http"
	"net/url"
)

// addressDialError marks a dial to one of an entry's addresses that made no
// connection: nothing of the request was sent, so it may go to another.
type addressDialError struct{ err error }

func (e *addressDialError) Error() string { return e.err.Error() }
func (e *addressDialError) Unwrap() error { return e.err }

// spread is the lease's transport of an entry with several addresses. It
// sends each request that names one of them to the next address in turn
// that is up (round robin), and one whose dial failed to the next, while the
// request can be sent again (no body, or GetBody), counting each move
// (Stats.AddressFailovers). A connection serves many
// requests (HTTP/2), so a request goes to the address picked for it, over
// that address's connections.
type spread struct{ e *entry }

func (s spread) RoundTrip(req *http.Request) (*http.Response, error) {
	e := s.e
	if len(e.addrs) == 1 || req.URL == nil || e.addressOf(canonicalAddr(req.URL, "443")) == nil {
		// Not one of its addresses: the dial refuses it.
		return countedDials{byURL{e}}.RoundTrip(req)
	}
	if _, ok := req.Context().Value(requestDialsKey{}).(*requestDials); !ok {
		req = req.WithContext(withRequestDials(req.Context())) // one budget of dials over every address
	}
	var tried uint64
	all := uint64(1)<<len(e.addrs) - 1
	body := req.Body
	for {
		a := e.pick(tried)
		tried |= 1 << a.index
		out := req.WithContext(req.Context())
		u := *req.URL
		u.Host = a.host
		out.URL, out.Body = &u, body
		if req.Host == "" || req.Host == req.URL.Host {
			out.Host = a.host
		}
		resp, err := a.cold.RoundTrip(out)
		var dialErr *addressDialError
		if err == nil || !errors.As(err, &dialErr) || tried == all || req.Context().Err() != nil {
			return resp, err // the caller's cancellation is no address's failure
		}
		var ok bool
		if body, ok = replay(req); !ok {
			return resp, err
		}
		e.pool.noteFailover()
	}
}

// replay is req's body to send once more; false when it cannot be.
func replay(req *http.Request) (io.ReadCloser, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	return body, err == nil
}

// byURL sends each request to the address its URL names (the primary
// address's cold start for any other, whose dial is refused): probes ask
// each address in turn.
type byURL struct{ e *entry }

func (b byURL) RoundTrip(req *http.Request) (*http.Response, error) {
	return b.e.addressFor(req.URL).cold.RoundTrip(req)
}

// addressFor is the address u names, or the primary.
func (e *entry) addressFor(u *url.URL) *address {
	if u != nil && len(e.addrs) > 1 {
		if a := e.addressOf(canonicalAddr(u, "443")); a != nil {
			return a
		}
	}
	return e.addrs[0]
}
