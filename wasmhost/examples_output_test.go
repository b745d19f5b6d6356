package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// An example reports its result on stdout: a stdout the host fails (EIO)
// lost that report, and the guest exited 0 as if it had been read. It
// exits 2 and says on stderr that the result was not written.
func TestExampleWhoseStdoutFailsExits2(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	for _, name := range []string{"mlp", "transformer"} {
		m := compile(t, h, buildGuest(t, "examples/"+name))
		var stderr bytes.Buffer
		_, err := h.Run(context.Background(), m, WithArgs(name+".wasm", "--steps", "1"), WithStdout(failingWriter{}), WithStderr(&stderr))
		var exit *ExitError
		require.True(t, errors.As(err, &exit), "%s: %v %s", name, err, stderr.String())
		require.Equal(t, uint32(2), exit.Code, stderr.String())
		require.Contains(t, stderr.String(), name+": writing the result to stdout: ")
		require.Zero(t, liveBuffers(c))
	}
}

// A call the host refuses ends an example with exit code 2 and a message
// naming the example and its step and size: "error: vkrt: EDQUOT: …"
// alone left the user to guess which --scale went past the quota.
func TestExampleRefusedNamesItsStep(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	for name, want := range map[string]string{
		"mlp":         "mlp: step 3 (batch 640): vkrt: EDQUOT: buffer_create: ",
		"transformer": "transformer: step 1 (sequence of 240): vkrt: EDQUOT: buffer_create: ",
	} {
		m := compile(t, h, buildGuest(t, "examples/"+name))
		var stderr bytes.Buffer
		_, err := h.Run(context.Background(), m, WithArgs(name+".wasm", "--scale", "10"), WithMaxDeviceBytes(1000000), WithStdout(io.Discard), WithStderr(&stderr))
		var exit *ExitError
		require.True(t, errors.As(err, &exit), "%s: %v %s", name, err, stderr.String())
		require.Equal(t, uint32(2), exit.Code, stderr.String())
		require.Contains(t, stderr.String(), want)
		require.Zero(t, liveBuffers(c))
	}
}

// The examples' CPU references held a whole batch or sequence where the
// device held it well, and ended the guest in the Go runtime's "fatal
// error: out of memory" after the device had computed it: the MLP's hidden
// activations, 2 KiB a sample (a batch of 5120 under 12 MiB of guest
// memory, as 2 million under the default 1 GiB), the transformer's
// attention scores, n*n float32s three times (800 tokens under 10 MiB, as
// 9600 under 1 GiB). The references take their inputs in parts.
func TestExampleReferencesFitAGuestOfLittleMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages uint32
		args  []string
		want  string
	}{
		{"mlp", 192, []string{"--steps", "4", "--scale", "80"}, "mlp: 4 steps, 8320 samples, 64 -> 256 -> 10, every output matches the CPU reference"},
		{"transformer", 160, []string{"--steps", "1", "--scale", "100"}, "transformer: 1 steps, 800 tokens, width 64, MLP 256, every output matches the CPU reference"},
	} {
		c := openClient(t)
		h := newHost(t, context.Background(), c, WithMaxMemoryPages(tc.pages))
		m := compile(t, h, buildGuest(t, "examples/"+tc.name))
		var out bytes.Buffer
		_, err := h.Run(context.Background(), m, WithArgs(append([]string{tc.name + ".wasm"}, tc.args...)...), WithStdout(&out), WithStderr(&out))
		require.NoError(t, err, out.String())
		require.Contains(t, out.String(), tc.want)
		require.Zero(t, liveBuffers(c))
	}
}
