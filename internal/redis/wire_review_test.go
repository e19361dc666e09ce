package redis

import (
	"reflect"
	"testing"
)

// releaseCall resets a call field by field: a field added to call must be
// reset there too (and TestReleasedCallIsFresh told of it), then counted
// here.
func TestReleaseCallResetsEveryField(t *testing.T) {
	if n := reflect.TypeOf(call{}).NumField(); n != 9 {
		t.Fatalf("call has %d fields, releaseCall resets 8 and keeps wake: reset the new one", n)
	}
}
