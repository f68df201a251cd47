package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves the flags of a command that come after its positional
// arguments in front of them: urfave/cli v2 stops parsing flags at the first
// positional argument, yet `gotune trials EXP --json` is how the commands
// are documented. Everything after "--" stays positional.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	if sub := cmd.Command(args[2]); sub != nil {
		// A subcommand's flags: move them after both names.
		out := flagsFirst(&cli.App{Commands: []*cli.Command{sub}}, append([]string{args[0]}, args[2:]...))
		return append([]string{args[0], args[1]}, out[1:]...)
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, positional []string
	dashdash := false
	rest := args[2:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			dashdash = true
			positional = append(positional, rest[i+1:]...)
			i = len(rest)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(rest) {
				flags = append(flags, rest[i+1])
				i++
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append([]string{args[0], args[1]}, flags...)
	if dashdash {
		out = append(out, "--")
	}
	return append(out, positional...)
}
