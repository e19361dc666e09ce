package bucket

import "strconv"

// Kind is what one bucket of a script call is. Each bucket of a call
// takes three arguments, ARGV[3i-2..3i] (written by RateArgs, QuotaArgs
// or CapArgs, never by hand: the first one tells the script the kind, by
// its sign), and fills three slots of the decision (see DecisionLen):
//
//	kind   arguments                       d[1+3i]          d[2+3i]                     d[3+3i]
//	Rate   interval µs > 0, burst, cost    whole tokens     ms until the cost fits      ms until full
//	Quota  -limit < 0, windows, cost       cost left        ms to the window's end      ms to the window's end
//	                                                        when refused, else 0
//	Cap    0, max, maxDuration µs          slots left       1000 when full, else 0      the member taken (0: none)
//
// A lease is no kind of its own: it is a rate's, asked for in the same
// call (LeaseScript).
type Kind int

// The kinds, by value (compiled into every policy by internal/config).
const (
	Rate  Kind = 0 // a token bucket (GCRA)
	Quota Kind = 1 // a calendar quota's counter
	Cap   Kind = 2 // a concurrency cap's slots
)

// RateArgs returns the arguments of a rate bucket of shape l for a check.
func RateArgs(l Limit) []string {
	return []string{strconv.FormatFloat(l.Interval, 'g', -1, 64), strconv.FormatFloat(l.Burst, 'g', -1, 64), strconv.FormatFloat(l.Cost, 'g', -1, 64)}
}

// QuotaArgs returns the arguments of a quota of limit charged cost, its
// windows (WindowsArg) left "" for the call to fill in when it is made.
func QuotaArgs(limit int64, cost float64) []string {
	return []string{strconv.FormatInt(-limit, 10), "", strconv.FormatFloat(cost, 'g', -1, 64)}
}

// CapArgs returns the arguments of a concurrency cap of max slots, each
// held at most durUS µs.
func CapArgs(max, durUS int64) []string {
	return []string{"0", strconv.FormatInt(max, 10), strconv.FormatInt(durUS, 10)}
}

// WindowsArg is a quota's windows as the scripts read them: the bounds b
// (WindowBounds: the previous, current and next windows, µs since
// EpochUS) and the quotas' clock shift (µs, 0 but in tests).
func WindowsArg(b []int64, shiftUS int64) string {
	return strconv.FormatInt(b[0], 10) + " " + strconv.FormatInt(b[1], 10) + " " +
		strconv.FormatInt(b[2], 10) + " " + strconv.FormatInt(b[3], 10) + " " + strconv.FormatInt(shiftUS, 10)
}

// RateCharge returns the arguments of ChargeScript for a rate bucket of
// shape l charged amount tokens.
func RateCharge(l Limit, amount int64) []string {
	return []string{strconv.FormatFloat(l.Interval, 'g', -1, 64), strconv.FormatFloat(l.Burst, 'g', -1, 64), strconv.FormatInt(amount, 10)}
}

// QuotaCharge returns the arguments of ChargeScript for a quota of limit
// charged amount in the windows b (WindowsArg).
func QuotaCharge(limit, amount int64, b []int64, shiftUS int64) []string {
	return []string{strconv.FormatInt(-limit, 10), WindowsArg(b, shiftUS), strconv.FormatInt(amount, 10)}
}
