package redis

// The errors of a check, and how they sort: what a caller counts, what
// says a connection ended, what may be tried again.

import (
	"errors"
	"io"
	"net"
	"strings"
)

// Errors a caller may branch on. Any other error of a check is a
// connection's (a reset, EOF) or a reply's; Kind sorts them all.
var (
	ErrTimeout    = errors.New("tollgate: redis did not answer within the timeout")
	ErrBadReply   = errors.New("tollgate: unexpected reply from redis")
	ErrQueueFull  = errors.New("tollgate: too many checks in flight on one redis connection")
	ErrDialFailed = errors.New("tollgate: dialing redis failed")
	ErrNoRoute    = errors.New("tollgate: no redis node is known for the key yet")
)

// Errors of the wire and the topology, sorted by Kind.
var (
	errNoScript = errors.New("tollgate: redis does not hold the script (NOSCRIPT)")
	errConnDead = errors.New("tollgate: redis connection closed")
	errWrite    = errors.New("tollgate: writing to redis failed: connection closed")
	errOwed     = errors.New("tollgate: redis connection failed with the reply owed")
	errStale    = errors.New("tollgate: redis owes replies past their deadline: connection closed")
	errNotSent  = errors.New("tollgate: redis connection closed before the call was written")
	errRedirect = errors.New("tollgate: redis redirected the check")
	errReadOnly = errors.New("tollgate: redis answered as a read-only replica")
)

// Kinds of failure (Kind).
const (
	KindTimeout    = iota // no answer within the timeout, or a connection gone silent
	KindDial              // no connection: dials fail (ErrDialFailed)
	KindConnection        // a connection closed, reset or failed a write
	KindReply             // a reply no call expects (ErrBadReply, an error reply)
	KindRedirect          // a redirection not followed (MOVED, ASK)
	KindReadOnly          // a replica answered (READONLY)
	KindNoRoute           // the key's node is not known yet (ErrNoRoute)
	KindQueueFull         // too many calls on one connection (ErrQueueFull)
	Kinds                 // the number of kinds
)

// Kind sorts a check's error.
func Kind(err error) int {
	switch err {
	case ErrTimeout, errStale:
		return KindTimeout
	case ErrDialFailed:
		return KindDial
	case errConnDead, errWrite, errOwed:
		return KindConnection
	case errRedirect:
		return KindRedirect
	case errReadOnly:
		return KindReadOnly
	case ErrNoRoute:
		return KindNoRoute
	case ErrQueueFull:
		return KindQueueFull
	}
	if isTimeout(err) {
		return KindTimeout
	}
	if connLost(err) {
		return KindConnection
	}
	return KindReply
}

// isTimeout reports a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// neverSent reports an error of a call that cannot have reached Redis
// whole: it may be tried once more.
func neverSent(err error) bool { return err == errWrite || err == errNotSent }

// connLost reports an error of a connection that failed as a whole (the
// server closed it, a write failed), as opposed to a timeout or a reply.
func connLost(err error) bool {
	return err == errWrite || err == errNotSent || err != ErrTimeout && err != errStale && err != errOwed && err != ErrBadReply && err != errNoScript && err != errRedirect &&
		err != errReadOnly && err != ErrQueueFull && err != ErrDialFailed && !isTimeout(err)
}

// replyFault reports an error that says nothing of whether the pool's
// connections outlived their Redis: a reply (NOSCRIPT, a redirection,
// READONLY), our own queue full, no dial, or a timeout (Redis, or the
// pod, slow: the connection is still the one Redis serves; suspecting
// every connection for it would add a PING to the next checks of a pod
// already late). A connection that stays silent goes stale (errStale).
func replyFault(err error) bool {
	return err == errNoScript || err == errRedirect || err == errReadOnly || err == ErrQueueFull || err == ErrDialFailed ||
		err == ErrTimeout || isTimeout(err)
}

// lostUnder reports an error of a connection that ended with the call
// written to it: Redis may have run the call, unless Redis itself
// restarted.
func lostUnder(err error) bool {
	return err == errOwed || !neverSent(err) && connLost(err)
}

// cut reports a dial whose connection was cut under way (EOF, a reset):
// Redis is there and closed it, as opposed to refusing or timing out.
func cut(err error) bool { return errors.Is(err, io.EOF) || reset(err) }

// reset reports an error of a socket reset by the peer (a reset, a broken
// pipe). By the error's text: the interpreter has no syscall package.
func reset(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset by peer") || strings.Contains(s, "broken pipe")
}
