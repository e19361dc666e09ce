package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// write prints the result of call c in format ("table" or "json"): json
// is the endpoint's JSON re-indented, or {"ok":true} after a 204; table is
// the state as aligned columns, or the line c.done.
func write(w io.Writer, format string, c call, res *result) error {
	if format == "json" {
		if res.state == nil {
			_, err := io.WriteString(w, "{\"ok\":true}\n")
			return err
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(res.raw), "", "  "); err != nil {
			return err // not reached: decodeState accepted it
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	}
	if res.state == nil {
		_, err := io.WriteString(w, c.done+"\n")
		return err
	}
	return writeTable(w, res.state)
}

// writeTable prints st as a table: the class and key, one row per policy,
// one per quota, and a line for the concurrency cap. Text from the
// endpoint is printed through printable.
//
//	class:  api
//	key:    K
//
//	POLICY  LIMIT  WINDOW  REMAINING  RESET  OVERRIDE
//	api     20     1m      13         21s    -
//
//	QUOTA  LIMIT  REMAINING  RESET
//	daily  1000   990        1h
//
//	concurrency: 1 in flight, max 5
func writeTable(w io.Writer, st *state) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "class:\t%s\n", printable(st.Class, 200))
	fmt.Fprintf(tw, "key:\t%s\n\n", printable(st.Key, -1))
	if len(st.Policies) == 0 {
		fmt.Fprintln(tw, "policies: none")
	} else {
		fmt.Fprintln(tw, "POLICY\tLIMIT\tWINDOW\tREMAINING\tRESET\tOVERRIDE")
		for _, p := range st.Policies {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", printable(p.Name, 200), p.Limit, seconds(p.Window),
				p.Remaining, seconds(p.Reset), overrideSummary(p.Override))
		}
	}
	fmt.Fprintln(tw)
	if len(st.Quotas) == 0 {
		fmt.Fprintln(tw, "quotas: none")
	} else {
		fmt.Fprintln(tw, "QUOTA\tLIMIT\tREMAINING\tRESET")
		for _, q := range st.Quotas {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", printable(q.Name, 200), q.Limit, q.Remaining, seconds(q.Reset))
		}
	}
	fmt.Fprintln(tw)
	if c := st.Concurrency; c == nil {
		fmt.Fprintln(tw, "concurrency: no cap")
	} else {
		fmt.Fprintf(tw, "concurrency: %d in flight, max %d\n", c.InFlight, c.Max)
	}
	return tw.Flush()
}

// overrideSummary is an override in one cell: "1000/1m burst 50 until
// 2026-12-07T19:00:00Z", or "-" for none.
func overrideSummary(o *override) string {
	if o == nil {
		return "-"
	}
	s := strconv.FormatInt(o.Average, 10) + "/" + printable(o.Period, 40) + " burst " + strconv.FormatInt(o.Burst, 10)
	if o.ExpiresAt == "" {
		return s + " until removed"
	}
	return s + " until " + printable(o.ExpiresAt, 40)
}

// seconds formats n seconds as a Go duration without its zero units: 21s,
// 1m, 1h30m, 24h.
func seconds(n int64) string {
	u := uint64(n)
	sign := ""
	if n < 0 {
		sign, u = "-", -u // two's complement: right for math.MinInt64 too
	}
	if u == 0 {
		return "0s"
	}
	var b strings.Builder
	b.WriteString(sign)
	if h := u / 3600; h > 0 {
		b.WriteString(strconv.FormatUint(h, 10) + "h")
	}
	if m := u % 3600 / 60; m > 0 {
		b.WriteString(strconv.FormatUint(m, 10) + "m")
	}
	if s := u % 60; s > 0 {
		b.WriteString(strconv.FormatUint(s, 10) + "s")
	}
	return b.String()
}

// printable is s as it may be printed on a terminal: each byte that is
// not UTF-8 as \xHH, each rune that is not graphic (tabs, newlines,
// escapes, bidi and zero-width controls, line separators) as \uHHHH, cut
// after maxRunes runes with "..." (below 0: no cut). Text from the endpoint
// so cannot move the cursor, clear the screen or break a table's columns.
func printable(s string, maxRunes int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if maxRunes >= 0 && n == maxRunes {
			b.WriteString("...")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsGraphic(r): // letters, marks, numbers, punctuation, symbols, spaces (Zs)
			b.WriteString(s[i : i+size])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
		n++
	}
	return b.String()
}
