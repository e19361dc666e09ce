//go:build !linux

package redis

import (
	"net"
	"syscall"
)

// rawOf: no look at the socket but on Linux (peek_linux.go); the
// connection's reader alone sees Redis close it.
func rawOf(_ net.Conn) syscall.RawConn { return nil }

func newPeeker(_ *rconn) func(fd uintptr) { return nil }
