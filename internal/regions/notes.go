package regions

import "sync"

// Notes is the requests' part of the exchange: the buckets that
// pressed against their share since the pod last flushed them
// (Exchanger.flush), by noteField, with the tokens asked.
type Notes struct {
	mu sync.Mutex
	m  map[string]int64
}

// maxNotes bounds the keys one pod notes per interval.
const maxNotes = 1024

// Note records that bucket (a policy's bucket key for a client) pressed
// against its share (refused, or emptied: no whole token left, whatever
// the region's share of the burst), asking tokens, so that the exchange
// tracks it. Those refused from memory (cached: the deny cache's, which
// Redis never counts) are noted under the bucket's key; those Redis
// decided under the key and freshSuffix, and count only until the key is
// tracked (then the script counts them).
func (n *Notes) Note(bucket string, tokens int64, cached bool) {
	if !cached {
		bucket += freshSuffix
	}
	n.mu.Lock()
	if n.m == nil {
		n.m = map[string]int64{}
	}
	if _, ok := n.m[bucket]; ok || len(n.m) < maxNotes {
		n.m[bucket] += tokens
	}
	n.mu.Unlock()
}

// freshSuffix marks a note of tokens Redis decided (note); a bucket key
// holds no space.
const freshSuffix = " r"

// take returns the notes and starts anew.
func (n *Notes) take() map[string]int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.m
	n.m = nil
	return m
}
