// Command tollgatectl reads and changes what Tollgate holds for one
// client through Tollgate's admin endpoint: the state of its buckets,
// quotas and concurrency cap (inspect), a refill (reset), and a temporary
// limit of its own (override).
//
//	tollgatectl [global flags] inspect  -class C -key K
//	tollgatectl [global flags] reset    -class C -key K [-policy P]
//	tollgatectl [global flags] override -class C -key K -average N -burst N [-period 1s] [-ttl 24h]
//	tollgatectl [global flags] override -class C -key K -delete
//
// The class is the middleware's class (its buckets' namespace), the key
// the client's identity as the middleware sees it (an address, a header's
// value) before it is hashed. Global flags may also follow the command:
// -url (default $TOLLGATE_ADMIN_URL), -user and -password for basic auth
// (default $TOLLGATE_ADMIN_USER and $TOLLGATE_ADMIN_PASSWORD), -H 'Name:
// value' (repeatable), -o table|json and -timeout.
//
// Exit status: 0 done; 1 the endpoint refused or failed, could not be
// reached, or answered what Tollgate's admin endpoint does not; 2 a usage
// error, found before anything was sent.
//
// Nothing is logged: the key appears only in what a command prints (the
// state's table or JSON), never in an error message. What the endpoint
// sends is read up to maxReply bytes, and its text is printed with
// control characters escaped.
//
// It is plain compiled Go, standard library only; Traefik never loads it
// (scripts/yaegi-test.sh leaves cmd/ out). docs/admin.md has examples.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // the endpoint refused or failed, was not reached, or answered something else
	exitUsage  = 2 // bad flags or arguments; nothing was sent
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program's name), printing
// its result on stdout and errors on stderr, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runEnv(args, os.Getenv, stdout, stderr)
}

// runEnv is run with the environment read through getenv.
func runEnv(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var g globals
	root := flag.NewFlagSet("tollgatectl", flag.ContinueOnError)
	root.SetOutput(stderr)
	g.register(root)
	root.Usage = func() { printUsage(stderr, root) }
	if err := root.Parse(args); err != nil {
		return parseStatus(err)
	}
	if root.NArg() == 0 {
		fmt.Fprintln(stderr, "tollgatectl: a command is needed: inspect, reset or override")
		root.Usage()
		return exitUsage
	}
	name := root.Arg(0)
	if name == "help" {
		root.Usage()
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		// The name is not a key: a key comes only with -key.
		fmt.Fprintf(stderr, "tollgatectl: unknown command %s: want inspect, reset or override\n", quote(name, 40))
		return exitUsage
	}

	sub := flag.NewFlagSet("tollgatectl "+name, flag.ContinueOnError)
	sub.SetOutput(stderr)
	build := cmd.flags(sub)
	g.register(sub)
	sub.Usage = func() {
		own := flag.NewFlagSet(name, flag.ContinueOnError)
		own.SetOutput(stderr)
		cmd.flags(own)
		for _, l := range cmd.synopsis {
			fmt.Fprintf(stderr, "usage: tollgatectl [global flags] %s\n", l)
		}
		fmt.Fprintf(stderr, "\n%s\n\nflags:\n", cmd.doc)
		own.PrintDefaults()
		fmt.Fprintln(stderr, "\nglobal flags (before or after the command):")
		root.PrintDefaults()
	}
	if err := sub.Parse(root.Args()[1:]); err != nil {
		return parseStatus(err)
	}
	prefix := "tollgatectl " + name + ": "
	if n := sub.NArg(); n > 0 {
		// Not echoed: a stray argument is often half of an unquoted key.
		fmt.Fprintf(stderr, "%s%d unexpected argument(s) after the flags (quote a value that holds spaces)\n", prefix, n)
		return exitUsage
	}

	set := map[string]bool{}
	mark := func(f *flag.Flag) { set[f.Name] = true }
	root.Visit(mark)
	sub.Visit(mark)
	g.fromEnv(set, getenv)
	c, err := build(set)
	if err == nil {
		err = g.check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s%v (tollgatectl %s -h for help)\n", prefix, err, name)
		return exitUsage
	}
	ep, err := g.endpoint()
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		return exitUsage
	}
	defer ep.close()

	res, err := ep.do(c)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		return exitFailed
	}
	if err := write(stdout, g.output, c, res); err != nil {
		fmt.Fprintf(stderr, "%swriting the result: %v\n", prefix, err)
		return exitFailed
	}
	return exitOK
}

// parseStatus is the exit status after a flag set's Parse failed (the
// flag package has printed why, and the usage): 0 when help was asked.
func parseStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// printUsage prints the tool's usage and its global flags.
func printUsage(w io.Writer, root *flag.FlagSet) {
	fmt.Fprintln(w, "usage: tollgatectl [global flags] command [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, l := range commands[n].synopsis {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command):")
	root.PrintDefaults()
	fmt.Fprintln(w, "\n'tollgatectl command -h' describes a command.")
}

// quote is s quoted as a Go string with control characters and invalid
// UTF-8 escaped, cut to at most maxRunes runes: how text the user or the
// endpoint sent is named in a message.
func quote(s string, maxRunes int) string {
	return `"` + strings.ReplaceAll(printable(s, maxRunes), `"`, `\"`) + `"`
}
