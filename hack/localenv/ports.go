package localenv

import (
	"fmt"
	"net"
	"strconv"
)

// freePort asks the kernel for a free TCP port on ip. Another process may
// take it before we bind it; starters retry on "address already in use".
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("no free port on %s (is the loopback address %s usable?): %w", ip, ip, err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return strconv.Atoi(p)
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
