package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// outputFlag adds -o/--output to a read command: table (the default), json
// or yaml, as istioctl and kubectl name them.
func outputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// writeOutput prints v as JSON or YAML, or calls table with a tabwriter
// that is flushed afterwards. v is marshalled to JSON first, so JSON and
// YAML carry the same field names; []any and struct values print [] rather
// than null when empty as long as v itself is not nil.
func writeOutput(w io.Writer, format string, v any, table func(tw *tabwriter.Writer) error) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return writeJSONAsYAML(w, b)
	case "table":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if err := table(tw); err != nil {
			return err
		}
		return tw.Flush()
	default:
		return fmt.Errorf("-o %q: want table, json or yaml", format)
	}
}

// writeJSONAsYAML prints JSON text as block-style YAML, keeping the order of
// object keys (Envoy's JSON field order, for example).
func writeJSONAsYAML(w io.Writer, js []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(js, &n); err != nil {
		return fmt.Errorf("converting to YAML: %w", err)
	}
	blockStyle(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle clears the flow style JSON input gives every node, so the
// YAML prints in block style; strings stay as JSON quoted them only where
// YAML needs quotes.
func blockStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
	for _, c := range n.Content {
		blockStyle(c)
	}
}
