package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	gateway "github.com/clustergateway/cluster-gateway/cmd/apiserver/app"
	"github.com/clustergateway/cluster-gateway/cmd/apiserver/app/options"
	cli "github.com/clustergateway/cluster-gateway/cmd/kubectl-cgw/app"
)

// flagReference is docs/flags.md: the gateway's flags by the sections of
// its --help, then kubectl-cgw's commands with their flags.
func flagReference() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`# Flags

Every flag of ` + "`cluster-gateway`" + ` and ` + "`kubectl cgw`" + `. This file is generated from their flag sets
(` + "`cmd/apiserver/app/options`" + `, the generic API server's options it embeds, and ` + "`cmd/kubectl-cgw`" + `'s
commands) by ` + "`make docs`" + ` (hack/docgen); ` + "`make verify`" + ` fails when it is stale. Edit the flags' help
in the code, not here.

- [cluster-gateway](#cluster-gateway)
- [kubectl cgw](#kubectl-cgw)

`)
	if err := gatewayFlags(&b); err != nil {
		return nil, err
	}
	if err := cliFlags(&b); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func gatewayFlags(b *bytes.Buffer) error {
	cmd := gateway.NewCommand(context.Background())
	fss := options.NewOptions().Flags()
	fmt.Fprintf(b, "## cluster-gateway\n\n%s\n\n", mdText(cmd.Long))
	fmt.Fprintf(b, "Sections as in `cluster-gateway --help`:")
	for _, name := range fss.Order {
		fmt.Fprintf(b, " [%s](#%s),", name, anchor(name+" flags"))
	}
	b.Truncate(b.Len() - 1)
	b.WriteString(".\n\n")
	// Every flag the command takes is in a section, and nothing else is.
	listed := map[string]bool{}
	for _, name := range fss.Order {
		fs := fss.FlagSets[name]
		fmt.Fprintf(b, "### %s flags\n\n", name)
		if err := table(b, fs, nil); err != nil {
			return fmt.Errorf("cluster-gateway %s flags: %w", name, err)
		}
		fs.VisitAll(func(f *pflag.Flag) { listed[f.Name] = true })
	}
	var missing []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !listed[f.Name] && !f.Hidden {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("cluster-gateway takes flags in no section of options.Flags(): %v", missing)
	}
	return nil
}

func cliFlags(b *bytes.Buffer) error {
	root := cli.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	root.InitDefaultHelpFlag()
	fmt.Fprintf(b, "## kubectl cgw\n\n%s\n\n", mdText(root.Long))
	fmt.Fprintf(b, "Commands:")
	cmds := commands(root)
	for _, c := range cmds {
		fmt.Fprintf(b, " [%s](#%s),", c.CommandPath(), anchor(c.CommandPath()))
	}
	b.Truncate(b.Len() - 1)
	b.WriteString(".\n\n")
	fmt.Fprintf(b, "### Flags of every command\n\nThe hub is chosen with kubectl's own kubeconfig flags:\n\n")
	if err := table(b, root.PersistentFlags(), nil); err != nil {
		return err
	}
	for _, c := range cmds {
		fmt.Fprintf(b, "### %s\n\n%s\n\n    %s\n\n", c.CommandPath(), mdText(long(c)), c.UseLine())
		if c.Example != "" {
			fmt.Fprintf(b, "Examples:\n\n```sh\n%s\n```\n\n", strings.TrimRight(dedent(c.Example), "\n"))
		}
		if err := table(b, c.LocalNonPersistentFlags(), map[string]bool{"help": true}); err != nil {
			return fmt.Errorf("%s: %w", c.CommandPath(), err)
		}
	}
	return nil
}

// commands are root's subcommands, depth first, without help and completion.
func commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		out = append(out, c)
		out = append(out, commands(c)...)
	}
	return out
}

func long(c *cobra.Command) string {
	if c.Long != "" {
		return c.Long
	}
	return c.Short
}

// table lists the visible flags of fs, sorted by name, leaving out skip.
func table(b *bytes.Buffer, fs *pflag.FlagSet, skip map[string]bool) error {
	var flags []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !skip[f.Name] {
			flags = append(flags, f)
		}
	})
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	if len(flags) == 0 {
		b.WriteString("No flags of its own.\n\n")
		return nil
	}
	b.WriteString("| Flag | Default | Description |\n|---|---|---|\n")
	for _, f := range flags {
		typ, usage := pflag.UnquoteUsage(f)
		if usage == "" {
			return fmt.Errorf("--%s has no help text", f.Name)
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		if typ != "" {
			name += " " + typ
		}
		if f.Deprecated != "" {
			usage = "Deprecated: " + f.Deprecated + " " + usage
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", name, defaultValue(f), mdCell(usage))
	}
	b.WriteString("\n")
	return nil
}

// defaultValue is the flag's default as --help prints it, none for the
// zero values it leaves out; the home directory of whoever runs this is
// written $HOME, so the file is the same for everyone.
func defaultValue(f *pflag.Flag) string {
	v := f.DefValue
	switch {
	case v == "", v == "[]", v == "<nil>", v == "false" && f.Value.Type() == "bool", v == "map[]":
		return ""
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" && home != "/" {
		v = strings.ReplaceAll(v, home, "$HOME")
	}
	return "`" + strings.ReplaceAll(v, "|", `\|`) + "`"
}

// mdText is help text as Markdown prose: no <placeholder> read as HTML.
func mdText(s string) string {
	return strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(strings.TrimSpace(s))
}

// mdCell keeps a (possibly multi-line) help text in one Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(mdText(s), "|", `\|`), "\n", "<br>")
}

// anchor is GitHub's anchor for a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}
