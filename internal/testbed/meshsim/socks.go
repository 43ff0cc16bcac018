package meshsim

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The real proxy reaches the pods through a SOCKS5 proxy (its HTTP_PROXY=socks5://...): an
// HTTP proxy would not do, because Go's transport writes the request line with the Host the
// proxy passes on (the route's host, not the pod's address), so the pod the proxy chose would
// be lost. Through SOCKS the proxy asks for a connection to <pod ip>:<port>: the simulator
// refuses it when no pod there answers (as a dead address would), else it serves HTTP on the
// connection as that pod (servePod).

// podAddrKey carries the pod address a SOCKS connection was opened to into its requests.
type podAddrKey struct{}

// socksHandshakeTimeout bounds the SOCKS negotiation of one connection.
const socksHandshakeTimeout = 10 * time.Second

// ServeSOCKS accepts SOCKS5 CONNECT requests on l until ctx is done.
func (s *Simulator) ServeSOCKS(ctx context.Context, l net.Listener) error {
	pods := &podListener{addr: l.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	server := &http.Server{
		Handler:           http.HandlerFunc(s.servePod),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*podConn); ok {
				return context.WithValue(ctx, podAddrKey{}, pc.pod)
			}
			return ctx
		},
	}
	go func() { _ = server.Serve(pods) }()
	go func() {
		<-ctx.Done()
		_ = l.Close()
		_ = server.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the listener closed because ctx is done: a clean stop
			}
			return err
		}
		go s.socksConnect(c, pods)
	}
}

// socksConnect negotiates one SOCKS5 connection (no authentication, CONNECT only) and hands
// it to the pods' HTTP server when a pod answers at the address asked for.
func (s *Simulator) socksConnect(c net.Conn, pods *podListener) {
	_ = c.SetDeadline(time.Now().Add(socksHandshakeTimeout))
	host, err := readSOCKSRequest(c)
	if err != nil {
		c.Close()
		return
	}
	if s.answeringPod(host) == nil {
		// Reply 5: connection refused.
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		c.Close()
		return
	}
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case pods.conns <- &podConn{Conn: c, pod: host}:
	case <-pods.done:
		c.Close()
	}
}

// readSOCKSRequest reads the greeting and the CONNECT request and returns the host asked for.
func readSOCKSRequest(c net.Conn) (string, error) {
	buf := make([]byte, 256)
	if _, err := io.ReadFull(c, buf[:2]); err != nil || buf[0] != 5 {
		return "", errors.New("not SOCKS5")
	}
	if _, err := io.ReadFull(c, buf[:buf[1]]); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte{5, 0}); err != nil { // no authentication
		return "", err
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil || buf[0] != 5 || buf[1] != 1 {
		return "", errors.New("not a SOCKS5 CONNECT")
	}
	var host string
	switch buf[3] {
	case 1, 4: // IPv4, IPv6
		n := 4
		if buf[3] == 4 {
			n = 16
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return "", err
		}
		host = net.IP(append([]byte(nil), buf[:n]...)).String()
	case 3: // a name
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return "", err
		}
		n := int(buf[0])
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return "", err
		}
		host = string(buf[:n])
	default:
		return "", errors.New("unknown SOCKS5 address type " + strconv.Itoa(int(buf[3])))
	}
	if _, err := io.ReadFull(c, buf[:2]); err != nil {
		return "", err
	}
	_ = binary.BigEndian.Uint16(buf[:2]) // any port answers: the simulated pods declare none
	return host, nil
}

// podConn is a SOCKS connection to the pod at address pod.
type podConn struct {
	net.Conn
	pod string
}

// podListener hands the negotiated connections to an http.Server.
type podListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *podListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *podListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *podListener) Addr() net.Addr { return l.addr }
