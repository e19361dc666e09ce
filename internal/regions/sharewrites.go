package regions

// The exchange's reads and writes beside the buckets, in the region's own
// Redis: the demand counted and the limit's rate (readCounts), and the
// shares (writeShares). A write Redis refuses is a write not done: its
// key's share stays as it was, and is published so (unapplied).

import (
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// readCounts reads, beside each key's bucket, the demand counted (tokens
// since the last exchange; -1 when what is there is not a count) and the
// limit's rate (tokens per second, written by the script), node by node.
func (x *Exchanger) readCounts(keys []string) (map[string]int64, map[string]float64, error) {
	counts := make(map[string]int64, len(keys))
	rates := make(map[string]float64, len(keys))
	byNode := map[*redis.Pool][]string{}
	for _, k := range keys {
		if c := x.own.NodeFor(k); c != nil {
			byNode[c] = append(byNode[c], k)
		}
	}
	for c, ks := range byNode {
		var b []byte
		for _, k := range ks {
			b = redis.AppendCommand(b, "HMGET", shareKey(k), "n", "g")
		}
		r, err := c.SideDo(b, len(ks))
		if err != nil {
			return nil, nil, err
		}
		for i, k := range ks {
			if len(r[i]) != 2 {
				continue // absent (no hash yet), or an error reply
			}
			if r[i][0] != "" {
				n, err := strconv.ParseInt(r[i][0], 10, 64)
				if err != nil || n < 0 {
					n = -1
				}
				counts[k] = n
			}
			if g, err := strconv.ParseFloat(r[i][1], 64); err == nil && g > 0 && g < 1e12 {
				rates[k] = g
			}
		}
	}
	return counts, rates, nil
}

// shareOp is one write of a key's share: the tokens read are taken off its
// counter; share 0 deletes the hash (the key is back to static). bucket,
// was and ks say what to publish if the write fails (unapplied).
type shareOp struct {
	key   string
	share int64
	taken int64
	ttlMS int64

	bucket string
	was    int64 // the share before, ppm
	ks     *keyShares
}

// shareTx is one transaction of writeShares: its commands, and the op
// each writes.
type shareTx struct {
	cmds []byte
	ops  []int // by command
}

// add appends a command of op i.
func (tx *shareTx) add(i int, verb string, args ...string) {
	tx.cmds = redis.AppendCommand(tx.cmds, verb, args...)
	tx.ops = append(tx.ops, i)
}

// writeShares applies ops and reports, op by op, whether its write was
// done. Each key's writes go in a transaction, so that a share never lives
// without its expiry (a connection lost between HSET and PEXPIRE): one
// per node, or on a Cluster one per slot (a node refuses a transaction
// over keys of two slots: CROSSSLOT), all of a node's in one round trip.
// A write is done only when the replies say so: MULTI's OK, each command
// QUEUED, EXEC's array of as many replies, and none of its own commands'
// an error. A transaction refused whole (a command refused while queued,
// CROSSSLOT, MOVED while slots move), a lost connection or a topology not
// known yet fails every op it holds; an error inside EXEC (another type
// at the key) fails its op alone: the others' commands ran.
func (x *Exchanger) writeShares(ops []shareOp) []bool {
	done := make([]bool, len(ops))
	cluster := x.own.Mode() == redis.Cluster
	byNode := map[*redis.Pool]map[int]*shareTx{}
	for i, op := range ops {
		c := x.own.NodeFor(op.key)
		if c == nil {
			continue
		}
		slot := 0
		if cluster {
			slot = redis.KeySlot(op.key)
		}
		if byNode[c] == nil {
			byNode[c] = map[int]*shareTx{}
		}
		tx := byNode[c][slot]
		if tx == nil {
			tx = &shareTx{}
			byNode[c][slot] = tx
		}
		// Done until a reply says otherwise.
		done[i] = true
		if op.share == 0 { // back to static from above it: the hash goes
			tx.add(i, "DEL", op.key)
			continue
		}
		if op.taken > 0 {
			tx.add(i, "HINCRBY", op.key, "n", strconv.FormatInt(-op.taken, 10))
		} else if op.taken < 0 { // not a count: counting starts again
			tx.add(i, "HSET", op.key, "n", "0")
		}
		tx.add(i, "HSET", op.key, "s", strconv.FormatInt(op.share, 10))
		tx.add(i, "PEXPIRE", op.key, strconv.FormatInt(op.ttlMS, 10))
	}
	for c, txs := range byNode {
		var b []byte
		var order []*shareTx
		replies := 0
		for _, tx := range txs {
			b = append(redis.AppendCommand(b, "MULTI"), tx.cmds...)
			b = redis.AppendCommand(b, "EXEC")
			replies += len(tx.ops) + 2
			order = append(order, tx)
		}
		r, err := c.SideDo(b, replies)
		at := 0
		for _, tx := range order {
			n := len(tx.ops)
			if err != nil || !txRan(r[at:at+n+2], n) {
				for _, i := range tx.ops {
					done[i] = false
				}
			} else {
				for j, v := range r[at+n+1] {
					if isErrorValue(v) {
						done[tx.ops[j]] = false
					}
				}
			}
			at += n + 2
		}
	}
	return done
}

// txRan reports whether the replies r of MULTI, n commands and EXEC say
// that the transaction ran: OK, n times QUEUED, and an array of n replies.
func txRan(r [][]string, n int) bool {
	if len(r[0]) != 1 || r[0][0] != "OK" {
		return false
	}
	for _, q := range r[1 : n+1] {
		if len(q) != 1 || q[0] != "QUEUED" {
			return false
		}
	}
	return len(r[n+1]) == n // not refused whole (EXECABORT, CROSSSLOT, MOVED), nor nil
}

// isErrorValue reports whether v, a reply read by readValues, is an error
// (an error's text, "-ERR ..."), not a negative integer.
func isErrorValue(v string) bool {
	return len(v) > 1 && v[0] == '-' && (v[1] < '0' || v[1] > '9')
}

// unapplied puts op's key back in rep, and in the tracked keys, at its
// share before: a share that was to shrink and was not written is still
// the larger one, and must not be published smaller (a peer would grow
// into room this region never gave up). A share that was to grow was
// published larger before its write, which errs on the safe side; the
// exchange remembers it larger, so that any later cut is applied before it
// is published.
func (x *Exchanger) unapplied(rs *Settings, rep *report, op shareOp) {
	applied := op.share
	if applied == 0 {
		applied = rs.Static
	}
	if op.was <= applied || op.ks == nil {
		return
	}
	op.ks.share = op.was
	x.tracked[op.bucket] = op.ks
	rep.keys[op.bucket] = reportKey{demand: op.ks.demand, share: op.was, rate: op.ks.rate}
}
