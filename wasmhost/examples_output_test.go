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

// The MLP's CPU reference held a whole batch's hidden activations, 2 KiB a
// sample, where the device held them well: a batch of 5120 under 12 MiB
// of guest memory (as 2 million under the default 1 GiB) ended the guest
// in the Go runtime's "fatal error: out of memory" after the device had
// computed it. The reference takes the batch in parts.
func TestMLPReferenceFitsAGuestOfLittleMemory(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c, WithMaxMemoryPages(192))
	m := compile(t, h, buildGuest(t, "examples/mlp"))
	var out bytes.Buffer
	_, err := h.Run(context.Background(), m, WithArgs("mlp.wasm", "--steps", "4", "--scale", "80"), WithStdout(&out), WithStderr(&out))
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "mlp: 4 steps, 8320 samples, 64 -> 256 -> 10, every output matches the CPU reference")
	require.Zero(t, liveBuffers(c))
}

// The transformer's CPU reference held a whole sequence's attention scores
// (n*n float32s, three times) where the device held them well: 800 tokens
// under 10 MiB of guest memory (as 9600 under the default 1 GiB) ended the
// guest in "fatal error: out of memory" after the device had computed
// them. The reference takes the queries in parts.
func TestTransformerReferenceFitsAGuestOfLittleMemory(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c, WithMaxMemoryPages(160))
	m := compile(t, h, buildGuest(t, "examples/transformer"))
	var out bytes.Buffer
	_, err := h.Run(context.Background(), m, WithArgs("transformer.wasm", "--steps", "1", "--scale", "100"), WithStdout(&out), WithStderr(&out))
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "transformer: 1 steps, 800 tokens, width 64, MLP 256, every output matches the CPU reference")
	require.Zero(t, liveBuffers(c))
}
