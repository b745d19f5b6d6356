package client_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
)

func floats(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func values(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Adding two vectors on the pure-Go device, then the same work as a dry
// run: validated, measured, and holding no device memory. A program that
// imports _ "github.com/vkrt/vkrt/vk" gets the first Vulkan device from a
// plain client.Open(ctx).
func Example() {
	ctx := context.Background()
	d, err := cpu.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := client.Open(ctx, client.WithBackend(d))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	add := func(ctx context.Context) ([]byte, error) {
		a, err := c.Create(ctx, floats(1, 2, 3))
		if err != nil {
			return nil, err
		}
		b, err := c.Create(ctx, floats(4, 5, 6))
		if err != nil {
			return nil, err
		}
		sum, err := c.Empty(ctx, 12)
		if err != nil {
			return nil, err
		}
		if err := c.Run(ctx, kernel.Add(3), a, b, sum); err != nil {
			return nil, err
		}
		return sum.Read(ctx)
	}
	out, err := add(ctx)
	fmt.Println(values(out), err)

	dry, err := c.NewStream()
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err = add(dryrun.With(client.WithStream(ctx, dry)))
	r := dry.Report()
	fmt.Println(values(out), err, r.Usage().NumberAllocs, "buffers,", r.Dynamic[0].PagesUnmapped, "unmapped page")
	// Output:
	// [5 7 9] <nil>
	// [0 0 0] <nil> 3 buffers, 1 unmapped page
}
