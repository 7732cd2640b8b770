package httplimit

import (
	"net"
	"net/http"
	"net/netip"
)

// ClientIP is the address of the client's end of the connection, as one key: an IPv4 client of
// a dual-stack socket (::ffff:a.b.c.d, in any spelling) is its IPv4 address a.b.c.d, and IPv6
// addresses are in their canonical form (lower case, zeros compressed). X-Forwarded-For is not
// read: behind a proxy, name the client with an Identity of your own.
func ClientIP(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return host
}

// IPv6Prefix is an Identity that puts IPv6 clients of one /bits network under one key (one
// host usually holds a whole /64); IPv4 clients keep their own address.
func IPv6Prefix(bits int) func(*http.Request) string {
	return func(r *http.Request) string {
		ip := ClientIP(r)
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.Is6() {
			return ip
		}
		p, err := a.WithZone("").Prefix(bits)
		if err != nil {
			return ip
		}
		return p.String()
	}
}
