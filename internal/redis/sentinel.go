package redis

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

	redigo "github.com/gomodule/redigo/redis"
)

// resolvePrimary asks the sentinels in turn for the primary of masterName
// and switches to the first answer.
func (rc *Client) resolvePrimary() error {
	err := errors.New("no sentinel")
	for _, addr := range rc.opts.Endpoints {
		var hp []string
		hp, err = redigo.Strings(adminDo(&rc.opts, addr, rc.opts.SentinelUser, rc.opts.SentinelPass, 0,
			"SENTINEL", "get-master-addr-by-name", rc.opts.MasterName))
		if err == nil && len(hp) != 2 {
			err = fmt.Errorf("%w: %q", ErrBadReply, hp)
		}
		if err != nil {
			if errors.Is(err, redigo.ErrNil) {
				err = fmt.Errorf("sentinel %s does not know master %q", addr, rc.opts.MasterName)
			}
			continue
		}
		rc.setPrimary(net.JoinHostPort(hp[0], hp[1]))
		return nil
	}
	return fmt.Errorf("asking the sentinels for %q: %w", rc.opts.MasterName, err)
}

// setPrimary makes addr the primary; the old one's idle connections are
// closed.
func (rc *Client) setPrimary(addr string) {
	rc.topo.mu.Lock()
	defer rc.topo.mu.Unlock()
	c := rc.node(addr, true)
	if c == rc.topo.primary {
		return
	}
	old := "none"
	if rc.topo.primary != nil {
		old = rc.topo.primary.opts.Addr
	}
	rc.topo.primary = c
	c.suspect() // a node known before as a replica, or before a restart
	rc.forget(map[*Pool]bool{c: true})
	rc.hooks.changed()
	// The addresses come from a sentinel: quoted, so that no reply can
	// forge a log line.
	log.Printf("tollgate: redis sentinel: primary %q is now %q (was %q)", rc.opts.MasterName, addr, old)
}

// watch starts the sentinel watcher unless it runs.
func (rc *Client) watch() {
	if atomic.CompareAndSwapInt32(&rc.topo.watching, 0, 1) {
		go rc.watchSentinels()
	}
}

// watchSentinels follows +switch-master on the sentinels in turn until the
// client has been idle for watchIdle.
func (rc *Client) watchSentinels() {
	defer func() {
		_ = recover()
		atomic.StoreInt32(&rc.topo.watching, 0)
	}()
	for i := 0; !rc.idleFor(watchIdle); i++ {
		if err := rc.follow(rc.opts.Endpoints[i%len(rc.opts.Endpoints)]); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// follow subscribes to +switch-master on the sentinel at addr and switches
// primaries as announced. It returns nil once the client is idle, or the
// error that broke the subscription.
func (rc *Client) follow(addr string) error {
	var raw net.Conn
	conn, err := adminConn(&rc.opts, addr, rc.opts.SentinelUser, rc.opts.SentinelPass, 0, func(nc net.Conn) { raw = nc })
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := raw.Write(AppendCommand(nil, "SUBSCRIBE", "+switch-master")); err != nil {
		return err
	}
	br := bufio.NewReader(raw)
	for !rc.idleFor(watchIdle) {
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
			if f := strings.Fields(msg[2]); len(f) == 5 && f[0] == rc.opts.MasterName {
				rc.setPrimary(net.JoinHostPort(f[3], f[4]))
			}
		}
	}
	return nil
}
