package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// requireClosed fails unless d refuses work as a closed device does.
func requireClosed(t *testing.T, d *cpu.Device, msg string) {
	t.Helper()
	_, err := d.Storage().Alloc(16)
	require.ErrorIs(t, err, vkruntime.ErrClosed, msg)
}

// A device handed with WithBackend is the client's whatever follows: one a
// later WithBackend replaces, or a nil one after it, is closed by Open,
// where it was left open with nobody to close it; the device the client
// runs on stays open, given once or twice.
func TestWithBackendReplacedIsClosed(t *testing.T) {
	ctx := context.Background()
	newDevice := func() *cpu.Device {
		d, err := cpu.New()
		require.NoError(t, err)
		return d
	}

	replaced, kept := newDevice(), newDevice()
	c, err := Open(ctx, WithBackend(replaced), WithBackend(kept))
	require.NoError(t, err)
	require.Same(t, kept, c.Device())
	requireClosed(t, replaced, "the replaced device is closed")
	b, err := c.Create(ctx, []byte{1, 2, 3, 4})
	require.NoError(t, err, "the device the client runs on is open")
	require.NoError(t, b.Free())
	require.NoError(t, c.Close())
	requireClosed(t, kept, "Close closes the device the client ran on")

	d := newDevice()
	c, err = Open(ctx, WithBackend(d), WithBackend(nil))
	require.EqualError(t, err, "client: invalid option: WithBackend was given no device (nil)")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Nil(t, c)
	requireClosed(t, d, "a failed Open closes the device handed before the nil one")

	twice := newDevice()
	c, err = Open(ctx, WithBackend(twice), WithBackend(twice))
	require.NoError(t, err)
	_, err = c.Empty(ctx, 16)
	require.NoError(t, err, "a device given twice is the one the client runs on, left open")
	require.NoError(t, c.Close())
	requireClosed(t, twice, "Close closes it")
}

// A typed nil a later WithBackend replaced is never used, so Open runs on
// the device that replaced it: closing it as replaced panicked.
func TestWithBackendReplacingATypedNilOpens(t *testing.T) {
	var typedNil *cpu.Device
	kept, err := cpu.New()
	require.NoError(t, err)
	c, err := Open(context.Background(), WithBackend(typedNil), WithBackend(kept))
	require.NoError(t, err)
	require.Same(t, kept, c.Device())
	require.NoError(t, c.Close())
}

// A nil Option fails Open with ErrInvalidOption, where calling it panicked,
// and the devices handed before and after it are closed, as on any failed
// Open.
func TestNilOptionIsRefused(t *testing.T) {
	before, err := cpu.New()
	require.NoError(t, err)
	after, err := cpu.New()
	require.NoError(t, err)
	var c *Client
	require.NotPanics(t, func() {
		c, err = Open(context.Background(), WithBackend(before), nil, WithBackend(after))
	})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.EqualError(t, err, "client: invalid option: option 2 of the 3 given to Open is nil")
	require.Nil(t, c)
	requireClosed(t, before, "the device replaced is closed")
	requireClosed(t, after, "the device Open would have run on is closed")

	require.NotPanics(t, func() { c, err = Open(context.Background(), nil) })
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Nil(t, c)
}

// A nil pointer as the device (a nil *cpu.Device) fails Open with
// ErrInvalidOption, where Open panicked asking it its storage; the device
// handed before it is closed.
func TestWithBackendOfANilPointerIsRefused(t *testing.T) {
	var typedNil *cpu.Device
	before, err := cpu.New()
	require.NoError(t, err)
	var c *Client
	require.NotPanics(t, func() { c, err = Open(context.Background(), WithBackend(before), WithBackend(typedNil)) })
	require.ErrorIs(t, err, ErrInvalidOption)
	require.EqualError(t, err, "client: invalid option: WithBackend was given a nil *cpu.Device")
	require.Nil(t, c)
	requireClosed(t, before, "the device replaced is closed")
}
