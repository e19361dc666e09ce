package client

import (
	"encoding/base64"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serialize writes members back as RFC 9651 says (4.1), for comparing a
// parse with the field's canonical form.
func serialize(ms []member, dict bool) string {
	var b strings.Builder
	for i := range ms {
		if i > 0 {
			b.WriteString(", ")
		}
		m := &ms[i]
		if dict {
			b.WriteString(m.key)
			if !m.isInner() && m.val.kind == kindBoolean && m.val.num == 1 {
				writeParams(&b, m.params)
				continue
			}
			b.WriteByte('=')
		}
		if m.isInner() {
			b.WriteByte('(')
			for j := range m.inner {
				if j > 0 {
					b.WriteByte(' ')
				}
				writeBare(&b, m.inner[j].val)
				writeParams(&b, m.inner[j].params)
			}
			b.WriteByte(')')
		} else {
			writeBare(&b, m.val)
		}
		writeParams(&b, m.params)
	}
	return b.String()
}

func writeParams(b *strings.Builder, ps []param) {
	for _, p := range ps {
		b.WriteByte(';')
		b.WriteString(p.key)
		if p.val.kind == kindBoolean && p.val.num == 1 {
			continue
		}
		b.WriteByte('=')
		writeBare(b, p.val)
	}
}

func writeBare(b *strings.Builder, v value) {
	switch v.kind {
	case kindInteger:
		b.WriteString(strconv.FormatInt(v.num, 10))
	case kindDecimal:
		s := strconv.FormatFloat(v.dec, 'f', 3, 64)
		s = strings.TrimRight(s, "0")
		if strings.HasSuffix(s, ".") {
			s += "0"
		}
		b.WriteString(s)
	case kindString:
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v.str))
		b.WriteByte('"')
	case kindToken:
		b.WriteString(v.str)
	case kindBytes:
		b.WriteString(":" + base64.StdEncoding.EncodeToString([]byte(v.str)) + ":")
	case kindBoolean:
		b.WriteString("?" + strconv.FormatInt(v.num, 10))
	case kindDate:
		b.WriteString("@" + strconv.FormatInt(v.num, 10))
	case kindDisplay:
		b.WriteString(`%"`)
		for i := 0; i < len(v.str); i++ {
			c := v.str[i]
			if c == '%' || c == '"' || c < 0x20 || c > 0x7e {
				b.WriteString("%" + strconv.FormatInt(int64(c)>>4, 16) + strconv.FormatInt(int64(c)&15, 16))
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
}

func TestParseList(t *testing.T) {
	for _, c := range []struct {
		desc, in, want string // want "!" when the field must not parse
	}{
		{"Tollgate's policies", `"api";q=100;w=60, "login";q=5;w=60`, `"api";q=100;w=60, "login";q=5;w=60`},
		{"Tollgate's limits", `"api";r=17;t=0, "login";r=4;t=0`, `"api";r=17;t=0, "login";r=4;t=0`},
		{"draft 07 policy", `5;w=60;burst=5`, `5;w=60;burst=5`},
		{"a cap's quota unit", `"c";q=3;qu="concurrent-requests"`, `"c";q=3;qu="concurrent-requests"`},
		{"a partition key", `"api";r=1;t=2;pk=:cHJldGVuZA==:`, `"api";r=1;t=2;pk=:cHJldGVuZA==:`},
		{"unpadded bytes", `:cHJldGVuZA:`, `:cHJldGVuZA==:`},
		{"empty", ``, ``},
		{"spaces around", `  1 ,  2  `, `1, 2`},
		{"tabs after a comma", "1,\t2", `1, 2`},
		{"tokens", `sugar, tea, rum, */*, a:b/c`, `sugar, tea, rum, */*, a:b/c`},
		{"inner lists", `("foo" "bar");lvl=5, ("baz");lvl=1, ()`, `("foo" "bar");lvl=5, ("baz");lvl=1, ()`},
		{"inner list params", `(1;a 2;b=?0);c`, `(1;a 2;b=?0);c`},
		{"decimals", `1.5, -0.25, 123456789012.123`, `1.5, -0.25, 123456789012.123`},
		{"largest integers", `999999999999999, -999999999999999`, `999999999999999, -999999999999999`},
		{"booleans", `?1, ?0;a=?1`, `?1, ?0;a`},
		{"a date", `@1659578233`, `@1659578233`},
		{"a display string", `%"f%c3%bc%c3%bc"`, `%"f%c3%bc%c3%bc"`},
		{"escapes", `"a\"b\\c"`, `"a\"b\\c"`},
		{"a parameter twice", `1;a=1;b=2;a=3`, `1;a=3;b=2`},
		{"space after ;", `1; a=2`, `1;a=2`},
		{"trailing comma", `1,`, "!"},
		{"leading comma", `,1`, "!"},
		{"two commas", `1,,2`, "!"},
		{"leading tab", "\t1", "!"},
		{"no comma", `1 2`, "!"},
		{"16 digits", `1234567890123456`, "!"},
		{"4 decimals", `1.2345`, "!"},
		{"13 integer digits in a decimal", `1234567890123.1`, "!"},
		{"a dot alone", `1.`, "!"},
		{"a minus alone", `-`, "!"},
		{"unterminated string", `"abc`, "!"},
		{"bad escape", `"a\x"`, "!"},
		{"control in a string", "\"a\x01\"", "!"},
		{"non-ASCII in a string", "\"é\"", "!"},
		{"unterminated inner list", `(1 2`, "!"},
		{"no space in an inner list", `(1"a")`, "!"},
		{"bad boolean", `?2`, "!"},
		{"unterminated bytes", `:abc`, "!"},
		{"bad base64", `:a*b:`, "!"},
		{"uppercase key", `1;A=2`, "!"},
		{"key starting with a digit", `1;2a=2`, "!"},
		{"uppercase display hex", `%"%C3%BC"`, "!"},
		{"invalid UTF-8 display", `%"%c3"`, "!"},
		{"date with a decimal", `@1.5`, "!"},
		{"a lone =", `=`, "!"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			ms, err := parseList(c.in)
			if c.want == "!" {
				if err == nil {
					t.Fatalf("parseList(%q) = %q, want an error", c.in, serialize(ms, false))
				}
				return
			}
			if err != nil {
				t.Fatalf("parseList(%q): %v", c.in, err)
			}
			if got := serialize(ms, false); got != c.want {
				t.Fatalf("parseList(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestParseDictionary(t *testing.T) {
	for _, c := range []struct {
		desc, in, want string
	}{
		{"draft 07's limits", `limit=5, remaining=4, reset=12`, `limit=5, remaining=4, reset=12`},
		{"bare keys", `a, b;x=1, c=?1`, `a, b;x=1, c`},
		{"a key twice", `a=1, b=2, a=3`, `a=3, b=2`},
		{"inner list", `a=(1 2), b=3;q`, `a=(1 2), b=3;q`},
		{"values", `en="Applepie", da=:w4ZibGV0w6ZydGUK:`, `en="Applepie", da=:w4ZibGV0w6ZydGUK:`},
		{"uppercase key", `A=1`, "!"},
		{"IETF list", `"api";r=1`, "!"},
		{"trailing comma", `a=1,`, "!"},
		{"empty value", `a=`, "!"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			ms, err := parseDictionary(c.in)
			if c.want == "!" {
				if err == nil {
					t.Fatalf("parseDictionary(%q) = %q, want an error", c.in, serialize(ms, true))
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDictionary(%q): %v", c.in, err)
			}
			if got := serialize(ms, true); got != c.want {
				t.Fatalf("parseDictionary(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestParseBounds: a field, its members, its parameters and its inner
// lists are parsed up to their bounds and refused past them.
func TestParseBounds(t *testing.T) {
	repeat := func(item, sep string, n int) string {
		return strings.TrimSuffix(strings.Repeat(item+sep, n), sep)
	}
	params := func(n int) string {
		var b strings.Builder
		b.WriteString("1")
		for i := 0; i < n; i++ {
			b.WriteString(";k" + strconv.Itoa(i))
		}
		return b.String()
	}
	for _, c := range []struct {
		desc string
		in   string
		ok   bool
	}{
		{"maxMembers members", repeat("1", ",", maxMembers), true},
		{"one member more", repeat("1", ",", maxMembers+1), false},
		{"maxParams parameters", params(maxParams), true},
		{"one parameter more", params(maxParams + 1), false},
		{"maxInner items", "(" + repeat("1", " ", maxInner) + ")", true},
		{"one item more", "(" + repeat("1", " ", maxInner+1) + ")", false},
		{"maxField bytes", `"` + strings.Repeat("a", maxField-2) + `"`, true},
		{"one byte more", `"` + strings.Repeat("a", maxField-1) + `"`, false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			_, err := parseList(c.in)
			if (err == nil) != c.ok {
				t.Fatalf("parseList of %d bytes: err %v, want ok %v", len(c.in), err, c.ok)
			}
		})
	}
	if _, ok := joinField([]string{strings.Repeat("1,", maxField/4), strings.Repeat("1,", maxField/4) + "1"}); ok {
		t.Fatal("joinField: two lines over maxField joined")
	}
	if s, ok := joinField([]string{"1", "2"}); !ok || s != "1,2" {
		t.Fatalf("joinField(1, 2) = %q, %v", s, ok)
	}
}

// TestParseHostile runs random and mutated fields through both parsers:
// none may panic, and every success must write back to a field that
// parses to the same.
func TestParseHostile(t *testing.T) {
	rng := rand.New(rand.NewSource(38))
	seeds := []string{`"api";r=17;t=0, "login";r=4;t=0`, `limit=5, remaining=4, reset=12`, `(1 2);a=%"x", :AAA=:;b=?1`, `@-1, 1.5;a="\\"`}
	const alphabet = "\"\\;=,() :?@%*-.09azAZ\t\x00\xff"
	for i := 0; i < 20000; i++ {
		var in string
		if i%2 == 0 {
			b := []byte(seeds[i%len(seeds)])
			for j := rng.Intn(4); j >= 0; j-- {
				b[rng.Intn(len(b))] = alphabet[rng.Intn(len(alphabet))]
			}
			in = string(b)
		} else {
			b := make([]byte, rng.Intn(40))
			for j := range b {
				b[j] = alphabet[rng.Intn(len(alphabet))]
			}
			in = string(b)
		}
		checkRoundTrip(t, in)
	}
}

func checkRoundTrip(t *testing.T, in string) {
	t.Helper()
	for _, dict := range []bool{false, true} {
		parse := parseList
		if dict {
			parse = parseDictionary
		}
		ms, err := parse(in)
		if err != nil {
			continue
		}
		out := serialize(ms, dict)
		again, err := parse(out)
		if err != nil || serialize(again, dict) != out {
			t.Fatalf("%q parsed (dict %v) and written as %q, which parses to %q, %v", in, dict, out, serialize(again, dict), err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`"api";q=100;w=60, "login";q=5;w=60`, `"api";r=16;t=0, "login";r=0;t=12`, `5;w=60;burst=5`,
		`limit=5, remaining=0, reset=60`, `("a" 1.5);x=?0, %"%c3%bc", @1, :AAAA:`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkRoundTrip(t, in)
		_ = readLimits(map[string][]string{"Ratelimit": {in}, "Ratelimit-Policy": {in}}, time.Unix(1700000000, 0), nil)
	})
}
