package tollgate

// Redis Sentinel: which server is the primary (see topology.go for when it
// is asked), and the watcher that follows +switch-master.

import (
	"bufio"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// resolvePrimary asks the sentinels in turn for the primary of masterName
// and switches to the first answer.
func (b *backend) resolvePrimary() error {
	err := errors.New("no sentinel")
	for _, addr := range b.base.endpoints {
		var hp []string
		hp, err = redis.Strings(b.adminDo(addr, b.base.sentinelUser, b.base.sentinelPass, 0,
			"SENTINEL", "get-master-addr-by-name", b.base.masterName))
		if err == nil && len(hp) != 2 {
			err = fmt.Errorf("%w: %q", errBadReply, hp)
		}
		if err != nil {
			if errors.Is(err, redis.ErrNil) {
				err = fmt.Errorf("sentinel %s does not know master %q", addr, b.base.masterName)
			}
			continue
		}
		b.setPrimary(net.JoinHostPort(hp[0], hp[1]))
		return nil
	}
	return fmt.Errorf("asking the sentinels for %q: %w", b.base.masterName, err)
}

// setPrimary makes addr the primary; the old one's idle connections are
// closed.
func (b *backend) setPrimary(addr string) {
	b.topo.mu.Lock()
	defer b.topo.mu.Unlock()
	c := b.node(addr, true)
	if c == nil || c == b.topo.primary {
		return
	}
	old := "none"
	if b.topo.primary != nil {
		old = b.topo.primary.set.addr
	}
	b.topo.primary = c
	c.suspect() // a node known before as a replica, or before a restart
	b.forget(map[*redisClient]bool{c: true})
	b.breaker.probeSoon()
	// The addresses come from a sentinel: quoted, so that no reply can
	// forge a log line.
	log.Printf("tollgate: redis sentinel: primary %q is now %q (was %q)", b.base.masterName, addr, old)
}

// watch starts the sentinel watcher unless it runs.
func (b *backend) watch() {
	if atomic.CompareAndSwapInt32(&b.topo.watching, 0, 1) {
		go b.watchSentinels()
	}
}

// watchSentinels follows +switch-master on the sentinels in turn until the
// backend has been idle for watchIdle.
func (b *backend) watchSentinels() {
	defer func() {
		_ = recover()
		atomic.StoreInt32(&b.topo.watching, 0)
	}()
	for i := 0; !b.idleFor(watchIdle); i++ {
		if err := b.follow(b.base.endpoints[i%len(b.base.endpoints)]); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// follow subscribes to +switch-master on the sentinel at addr and switches
// primaries as announced. It returns nil once the backend is idle, or the
// error that broke the subscription.
func (b *backend) follow(addr string) error {
	var raw net.Conn
	conn, err := b.adminConn(addr, b.base.sentinelUser, b.base.sentinelPass, 0, func(nc net.Conn) { raw = nc })
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := raw.Write(appendCommand(nil, "SUBSCRIBE", "+switch-master")); err != nil {
		return err
	}
	br := bufio.NewReader(raw)
	for !b.idleFor(watchIdle) {
		_ = raw.SetReadDeadline(time.Now().Add(time.Second))
		msg, err := readStrings(br)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		// ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
		if len(msg) == 3 && msg[0] == "message" {
			if f := strings.Fields(msg[2]); len(f) == 5 && f[0] == b.base.masterName {
				b.setPrimary(net.JoinHostPort(f[3], f[4]))
			}
		}
	}
	return nil
}
