package config

// Config words Tollgate does not know. Traefik's decoder (mapstructure)
// ignores a key that names no field, so a misspelled option ("burts",
// "requestHeaderNme") would load and the route would run with another
// limit or another key. Each struct Traefik decodes keeps what it did not
// know in its Unknown field (mapstructure's ",remain"); compile refuses
// the config when any is set, naming the word and the nearest known one.

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// checkWords returns an error naming the first unknown word of the
// config, at any level, or nil.
func checkWords(cfg *Config) error {
	var w words
	w.check("", cfg.Unknown, Config{})
	w.source("sourceCriterion", cfg.SourceCriterion)
	w.check("lease.", cfg.Lease.Unknown, Lease{})
	w.quotas("quotas", cfg.Quotas)
	w.cost("responseCost", cfg.ResponseCost)
	w.concurrency("concurrency", cfg.Concurrency)
	for i, r := range cfg.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		w.check(f+".", r.Unknown, Rule{})
		w.source(f+".sourceCriterion", r.SourceCriterion)
		w.quotas(f+".quotas", r.Quotas)
		w.cost(f+".responseCost", r.ResponseCost)
		w.concurrency(f+".concurrency", r.Concurrency)
	}
	for i, p := range cfg.Plans {
		f := fmt.Sprintf("plans[%d]", i)
		w.check(f+".", p.Unknown, Plan{})
		if p.Lease != nil {
			w.check(f+".lease.", p.Lease.Unknown, Lease{})
		}
		w.quotas(f+".quotas", p.Quotas)
		w.cost(f+".responseCost", p.ResponseCost)
		w.concurrency(f+".concurrency", p.Concurrency)
	}
	w.check("redis.", cfg.Redis.Unknown, RedisConfig{})
	w.check("redis.tls.", cfg.Redis.TLS.Unknown, TLSConfig{})
	if r := cfg.Region; r != nil {
		w.check("region.", r.Unknown, RegionConfig{})
		for i, p := range r.Peers {
			f := fmt.Sprintf("region.peers[%d].", i)
			w.check(f, p.Unknown, PeerConfig{})
			w.check(f+"tls.", p.TLS.Unknown, TLSConfig{})
		}
	}
	return w.err
}

// words keeps the first unknown word found.
type words struct{ err error }

func (w *words) source(field string, c *SourceCriterion) {
	if c == nil {
		return
	}
	w.check(field+".", c.Unknown, SourceCriterion{})
	if c.IPStrategy != nil {
		w.check(field+".ipStrategy.", c.IPStrategy.Unknown, IPStrategy{})
	}
}

func (w *words) quotas(field string, qs []Quota) {
	for i, q := range qs {
		w.check(fmt.Sprintf("%s[%d].", field, i), q.Unknown, Quota{})
	}
}

func (w *words) cost(field string, c *ResponseCost) {
	if c != nil {
		w.check(field+".", c.Unknown, ResponseCost{})
	}
}

func (w *words) concurrency(field string, c *Concurrency) {
	if c != nil {
		w.check(field+".", c.Unknown, Concurrency{})
	}
}

// check records an error for the first (in sorted order) of unknown's
// words, with the nearest of schema's option names when one is near;
// prefix is where they were written ("rules[0].").
func (w *words) check(prefix string, unknown map[string]interface{}, schema interface{}) {
	if w.err != nil || len(unknown) == 0 {
		return
	}
	var got []string
	for k := range unknown {
		got = append(got, k)
	}
	sort.Strings(got)
	word := got[0]
	w.err = fmt.Errorf("%s%s: %s", prefix, printableWord(word), whyUnknown(word, schema))
}

// whyUnknown says what is wrong with word, a key of a struct of schema's
// type that names no option of it.
func whyUnknown(word string, schema interface{}) string {
	names := optionNames(schema)
	near, d := nearestWord(word, names)
	if strings.EqualFold(word, near) {
		// mapstructure took another spelling of it (its field's name, in
		// another case), and left this one over.
		return fmt.Sprintf("%q is written twice, in two cases: write it once", near)
	}
	for _, o := range otherLevels {
		if reflect.TypeOf(o.schema) == reflect.TypeOf(schema) {
			continue
		}
		for _, n := range optionNames(o.schema) {
			if strings.EqualFold(word, n) {
				return fmt.Sprintf("unknown option here (%q is an option of %s)", n, o.where)
			}
		}
	}
	if d > 2*nearBound(word) {
		return "unknown option"
	}
	return fmt.Sprintf("unknown option (did you mean %q?)", near)
}

// nearBound is the most edits a misspelling of a word of word's length
// takes for its suggestion to be worth giving.
func nearBound(word string) int {
	if n := len(word) / 3; n > 2 {
		return n
	}
	return 2
}

// otherLevels are the structs an option may belong to, and where each is
// written, for a word written at the wrong level.
var otherLevels = []struct {
	where  string
	schema interface{}
}{
	{"the top level", Config{}}, {"sourceCriterion", SourceCriterion{}}, {"sourceCriterion.ipStrategy", IPStrategy{}},
	{"rules[]", Rule{}}, {"plans[]", Plan{}}, {"lease", Lease{}}, {"quotas[]", Quota{}}, {"responseCost", ResponseCost{}},
	{"concurrency", Concurrency{}}, {"redis", RedisConfig{}}, {"redis.tls", TLSConfig{}}, {"region", RegionConfig{}},
	{"region.peers[]", PeerConfig{}},
}

// optionNames returns the option names of a config struct: its fields'
// json names.
func optionNames(schema interface{}) []string {
	t := reflect.TypeOf(schema)
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// nearestWord returns the name at the smallest edit distance from word,
// case aside (the first of equals, in names' order), and that distance
// doubled; a name that word begins (or that begins word) counts as one
// and a half edits away ("insecure": "insecureSkipVerify"; "maxDurtion":
// "maxDuration", not "max").
func nearestWord(word string, names []string) (string, int) {
	best, bestD := "", -1
	lw := strings.ToLower(word)
	for _, n := range names {
		ln := strings.ToLower(n)
		d := 2 * editDistance(lw, ln)
		if d > 3 && lw != "" && (strings.HasPrefix(ln, lw) || strings.HasPrefix(lw, ln)) {
			d = 3
		}
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best, bestD
}

// editDistance is Levenshtein's distance between a and b, in bytes;
// words longer than 64 bytes are cut (a config key, not a document).
func editDistance(a, b string) int {
	if len(a) > 64 {
		a = a[:64]
	}
	if len(b) > 64 {
		b = b[:64]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			if prev[j]+1 < c {
				c = prev[j] + 1
			}
			if cur[j-1]+1 < c {
				c = cur[j-1] + 1
			}
			cur[j] = c
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// printableWord quotes a word for an error: at most 64 bytes (80
// quoted), anything but printable ASCII escaped (it comes from whoever writes the dynamic
// config: a control character or a look-alike letter must show).
func printableWord(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	if s != "" && printable(s) && !strings.ContainsAny(s, "\"") {
		return s
	}
	if q := fmt.Sprintf("%+q", s); len(q) <= 80 {
		return q
	} else {
		return q[:80] + "..."
	}
}
