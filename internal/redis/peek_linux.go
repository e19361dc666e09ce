package redis

// A look at an idle connection's socket before a call is written to it:
// has Redis closed it? Linux only (peek_other.go: never).

import (
	"crypto/tls"
	"net"
	"syscall"
)

// rawOf returns the socket under nc (TCP, or TCP under TLS) for peekers,
// nil when there is none (a test's wrapper).
func rawOf(nc net.Conn) syscall.RawConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// newPeeker returns cn's look at its socket: a read that neither waits
// nor takes (MSG_PEEK|MSG_DONTWAIT) finds Redis's FIN (0 bytes) or RST
// (an error but "nothing yet") that cn's reader has not read yet. Made
// once per connection: a closure made per look would cost the
// interpreter a value more per check.
func newPeeker(cn *rconn) func(fd uintptr) {
	return func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), cn.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		cn.peerGone = n == 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
	}
}
