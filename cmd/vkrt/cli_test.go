package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// execute runs `vkrt name args...` in-process, with the subcommand's flags
// reset to their defaults first (cobra keeps flag values between runs), and
// returns what it wrote to stdout and to stderr.
func execute(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var sub *cobra.Command
	for _, c := range rootCmd.Commands() {
		if c.Name() == name {
			sub = c
		}
	}
	require.NotNil(t, sub, "%s is registered on the root command", name)
	sub.Flags().VisitAll(func(f *pflag.Flag) {
		require.NoError(t, f.Value.Set(f.DefValue))
		f.Changed = false
	})
	var out, errOut bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	rootCmd.SetArgs(append([]string{name}, args...))
	defer rootCmd.SetArgs(nil)
	err = rootCmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}
