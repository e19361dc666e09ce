package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A state is what the admin endpoint holds for one key of one class, as
// its GET and PUT answer. Times are whole seconds. Fields the tool does
// not know are ignored.
type state struct {
	Class       string        `json:"class"`
	Key         string        `json:"key"`
	Policies    []policyState `json:"policies"`    // never nil in a valid state
	Quotas      []quotaState  `json:"quotas"`      // may be empty
	Concurrency *capState     `json:"concurrency"` // nil: no concurrency cap
}

// A policyState is the key's bucket of one policy.
type policyState struct {
	Name      string    `json:"name"`
	Limit     int64     `json:"limit"`     // tokens per window
	Window    int64     `json:"window"`    // seconds
	Remaining int64     `json:"remaining"` // tokens left
	Reset     int64     `json:"reset"`     // seconds until the bucket is full
	Override  *override `json:"override"`  // nil: none
}

// An override is a limit of the key's own, replacing the policy's.
type override struct {
	Average   int64  `json:"average"`   // tokens per period
	Burst     int64  `json:"burst"`     // tokens
	Period    string `json:"period"`    // a Go duration
	ExpiresAt string `json:"expiresAt"` // RFC 3339; empty: until removed
}

// A quotaState is the key's use of one calendar quota.
type quotaState struct {
	Name      string `json:"name"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	Reset     int64  `json:"reset"` // seconds until the quota's window ends
}

// A capState is the key's concurrency cap.
type capState struct {
	Max      int64 `json:"max"`
	InFlight int64 `json:"inFlight"`
}

// errNotState prefixes the errors of a 200 reply that is not a state.
var errNotState = errors.New("the reply is not Tollgate's state of a key")

// decodeState decodes a state from a 200's body, and checks that it is
// one (a class and a list of policies) and that it is about the class and
// key asked. The errors do not quote the reply, which holds the key.
func decodeState(body []byte, class, key string) (*state, error) {
	var st state
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotState, err)
	}
	if st.Class == "" || st.Policies == nil {
		return nil, fmt.Errorf("%w: it has no class or no policies", errNotState)
	}
	// A key that is not UTF-8 comes back with U+FFFD in its place (JSON
	// strings are UTF-8): only a valid one can be compared.
	if st.Class != class || utf8.ValidString(key) && st.Key != key {
		return nil, fmt.Errorf("%w asked: it is about another class or key (does a proxy on the way re-encode the query?)", errNotState)
	}
	return &st, nil
}
