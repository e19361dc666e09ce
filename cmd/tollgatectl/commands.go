package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A command is one of the tool's commands: its flags, and what turns them,
// once parsed, into the call to make.
type command struct {
	synopsis []string // its usage lines, after the global flags
	doc      string   // what it does, for its -h

	// flags registers the command's flags in fs and returns the function
	// that checks them, given the names of the flags set, and returns the
	// call. Its error is a usage error.
	flags func(fs *flag.FlagSet) func(set map[string]bool) (call, error)
}

// A call is one exchange with the admin endpoint, as a command asks it.
type call struct {
	method string
	params []param // the query's parameters, in order
	body   []byte  // a JSON body; nil: none
	state  bool    // true: a 200 with the key's state answers it; false: a 204
	done   string  // after a 204, what the table output says was done
}

// A param is one query parameter of a call.
type param struct{ name, value string }

// param returns the value of c's parameter name; "" when it has none.
func (c call) param(name string) string {
	var vs []string
	for _, p := range c.params {
		if p.name == name {
			vs = append(vs, p.value)
		}
	}
	return strings.Join(vs, ",") // several keys: as the endpoint shows them
}

// commands are the tool's commands, by name.
var commands = map[string]command{
	"inspect": {
		synopsis: []string{"inspect  -class C -key K"},
		doc:      "Prints the key's state: each policy's bucket, each quota, the concurrency cap.",
		flags:    inspectFlags,
	},
	"reset": {
		synopsis: []string{"reset    -class C -key K [-policy P]"},
		doc:      "Refills the key's buckets and resets its quotas, or only those of policy P.",
		flags:    resetFlags,
	},
	"override": {
		synopsis: []string{
			"override -class C -key K -average N -burst N [-period 1s] [-ttl 24h]",
			"override -class C -key K -delete",
		},
		doc: "Gives the key a limit of its own (average tokens per period, burst), for ttl or until removed,\n" +
			"and prints its state; or, with -delete, removes it.",
		flags: overrideFlags,
	},
}

// target is the -class and -key flags every command takes.
type target struct {
	class string
	keys  keyList
}

// keyList is -key, repeatable: a class keyed by several headers
// (requestHeaderNames) takes one value per header, in their order.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(v string) error {
	*k = append(*k, v)
	return nil
}

func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.class, "class", "", "the middleware's `class` (required)")
	fs.Var(&t.keys, "key", "the client's `key`, as the middleware sees it, before hashing (required; any bytes); repeat it, in order, for a class keyed by several headers")
}

// check reports a missing class or key.
func (t *target) check() error {
	if t.class == "" {
		return errors.New("-class is required")
	}
	if len(t.keys) == 0 {
		return errors.New("-key is required")
	}
	for _, k := range t.keys {
		if k == "" {
			return errors.New("-key is required")
		}
	}
	return nil
}

func (t *target) params() []param {
	ps := []param{{"class", t.class}}
	for _, k := range t.keys {
		ps = append(ps, param{"key", k})
	}
	return ps
}

func inspectFlags(fs *flag.FlagSet) func(map[string]bool) (call, error) {
	var t target
	t.register(fs)
	return func(_ map[string]bool) (call, error) {
		if err := t.check(); err != nil {
			return call{}, err
		}
		return call{method: http.MethodGet, params: t.params(), state: true}, nil
	}
}

func resetFlags(fs *flag.FlagSet) func(map[string]bool) (call, error) {
	var t target
	var policy string
	t.register(fs)
	fs.StringVar(&policy, "policy", "", "reset only this `policy` (default: every policy and quota of the key)")
	return func(set map[string]bool) (call, error) {
		if err := t.check(); err != nil {
			return call{}, err
		}
		c := call{method: http.MethodDelete, params: t.params(),
			done: "ok: the key's buckets refilled and its quotas reset (class " + quote(t.class, 80) + ")"}
		if set["policy"] {
			if policy == "" {
				return call{}, errors.New("-policy is empty")
			}
			c.params = append(c.params, param{"policy", policy})
			c.done = "ok: policy " + quote(policy, 80) + " of the key reset (class " + quote(t.class, 80) + ")"
		}
		return c, nil
	}
}

// overrideBody is the body of an override's PUT.
type overrideBody struct {
	Average int64  `json:"average"`
	Burst   int64  `json:"burst"`
	Period  string `json:"period"`
	TTL     string `json:"ttl,omitempty"`
}

// defaultPeriod is -period's default: the configuration's, so that
// -average means what the average option means.
const defaultPeriod = "1s"

func overrideFlags(fs *flag.FlagSet) func(map[string]bool) (call, error) {
	var t target
	var b overrideBody
	var del bool
	t.register(fs)
	fs.Int64Var(&b.Average, "average", 0, "tokens refilled per period, an integer above 0 (required unless -delete)")
	fs.Int64Var(&b.Burst, "burst", 0, "the bucket's capacity in tokens, an integer above 0 (required unless -delete)")
	fs.StringVar(&b.Period, "period", defaultPeriod, "the refill `period` of -average, a Go duration (1s, 1m, 1h)")
	fs.StringVar(&b.TTL, "ttl", "", "how long the override lasts, a Go `duration` (default: until removed)")
	fs.BoolVar(&del, "delete", false, "remove the key's override instead of setting one")
	return func(set map[string]bool) (call, error) {
		if err := t.check(); err != nil {
			return call{}, err
		}
		if del {
			for _, f := range []string{"average", "burst", "period", "ttl"} {
				if set[f] {
					return call{}, fmt.Errorf("-delete takes no -%s", f)
				}
			}
			return call{method: http.MethodDelete, params: append(t.params(), param{"override", "1"}),
				done: "ok: the key's override removed (class " + quote(t.class, 80) + ")"}, nil
		}
		if b.Average <= 0 {
			return call{}, errors.New("-average must be an integer above 0")
		}
		if b.Burst <= 0 {
			return call{}, errors.New("-burst must be an integer above 0")
		}
		if err := positiveDuration("period", b.Period); err != nil {
			return call{}, err
		}
		if set["ttl"] {
			if err := positiveDuration("ttl", b.TTL); err != nil {
				return call{}, err
			}
		}
		body, err := json.Marshal(b)
		if err != nil {
			return call{}, fmt.Errorf("encoding the override: %w", err)
		}
		return call{method: http.MethodPut, params: t.params(), body: body, state: true}, nil
	}
}

// positiveDuration reports a value of flag name that is not a Go duration
// above zero.
func positiveDuration(name, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("-%s %s is not a Go duration (1s, 1m, 24h)", name, quote(v, 40))
	}
	if d <= 0 {
		return fmt.Errorf("-%s %s must be above 0", name, quote(v, 40))
	}
	return nil
}
