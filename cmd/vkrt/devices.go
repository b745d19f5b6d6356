package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/vk"
)

func newDevicesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "list Vulkan devices: heaps, budget, alignment, limits",
		Long: `List every Vulkan physical device the loader finds, in the order --device
indices use: name, type, vendor, API and driver versions, memory heaps (with
this process's budget and usage where the driver has VK_EXT_memory_budget),
memory types, the storage alignment and the limits that bound pages and
dispatches. --json writes one object per device per line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos, err := vk.Devices()
			if err != nil {
				return err
			}
			if asJSON {
				return writeDevicesJSON(cmd.OutOrStdout(), infos)
			}
			return writeDevicesText(cmd.OutOrStdout(), infos)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per device per line")
	return cmd
}

func init() { rootCmd.AddCommand(newDevicesCmd()) }

func writeDevicesJSON(w io.Writer, infos []vk.DeviceInfo) error {
	enc := json.NewEncoder(w)
	for _, info := range infos {
		if err := enc.Encode(info); err != nil {
			return err
		}
	}
	return nil
}

func writeDevicesText(w io.Writer, infos []vk.DeviceInfo) error {
	var b strings.Builder
	for i, d := range infos {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "device %d: %s (%s, %s, id 0x%04x)\n", d.Index, d.Name, d.Type, d.Vendor, d.DeviceID)
		driver := d.DriverVersion
		if d.DriverName != "" {
			driver = fmt.Sprintf("%s %s (%s)", d.DriverName, d.DriverVersion, d.DriverInfo)
		}
		fmt.Fprintf(&b, "  api %s, driver %s\n", d.APIVersion, driver)
		for _, h := range d.Heaps {
			kind := "host"
			if h.DeviceLocal {
				kind = "device-local"
			}
			fmt.Fprintf(&b, "  heap %d: %s %s", h.Index, memory.FormatBytes(h.Size), kind)
			if d.MemoryBudget {
				fmt.Fprintf(&b, ", budget %s, in use %s", memory.FormatBytes(h.Budget), memory.FormatBytes(h.Usage))
			}
			b.WriteString("\n")
		}
		if !d.MemoryBudget {
			b.WriteString("  budget: unknown (no VK_EXT_memory_budget)\n")
		}
		for _, t := range d.MemoryTypes {
			fmt.Fprintf(&b, "  memory type %d: heap %d, %s\n", t.Index, t.Heap, memoryTypeFlags(t))
		}
		l := d.Limits
		fmt.Fprintf(&b, "  alignment %d B (minStorageBufferOffsetAlignment %d), max storage buffer range %s, max allocations %d\n",
			max(4, l.MinStorageBufferOffsetAlignment), l.MinStorageBufferOffsetAlignment,
			memory.FormatBytes(l.MaxStorageBufferRange), l.MaxMemoryAllocationCount)
		fmt.Fprintf(&b, "  compute: work groups %v, work-group size %v (%s), shared memory %s, push constants %d B, robust buffer access %v\n",
			l.MaxComputeWorkGroupCount, l.MaxComputeWorkGroupSize, printable.Count(int(l.MaxComputeWorkGroupInvocations), "invocation"),
			memory.FormatBytes(uint64(l.MaxComputeSharedMemorySize)), l.MaxPushConstantsSize, d.RobustBufferAccess)
		if d.SparseResidency {
			var heap uint64 // the largest device-local heap, where the storage's memory lies
			for _, h := range d.Heaps {
				if h.DeviceLocal {
					heap = max(heap, h.Size)
				}
			}
			fmt.Fprintf(&b, "  sparse residency: yes, address space %s (the virtual layout binds memory granule by granule; its ranges take at most %s of it, leaving room for the heap's allocations)\n",
				memory.FormatBytes(l.SparseAddressSpaceSize), memory.FormatBytes(vkruntime.RangesSpace(l.SparseAddressSpaceSize, heap)))
		} else {
			b.WriteString("  sparse residency: no (the virtual layout falls back to SubSlices)\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func memoryTypeFlags(t vk.MemoryType) string {
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{{t.DeviceLocal, "device-local"}, {t.HostVisible, "host-visible"}, {t.HostCoherent, "host-coherent"}, {t.HostCached, "host-cached"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	if len(flags) == 0 {
		return "no flags"
	}
	return strings.Join(flags, ", ")
}

// noBackendWhy is err, an open of the default device, saying what the
// command line lacks where the build has no backend: built without cgo,
// device.ErrNoBackend's advice (import the vk package, hand the client a
// device) is for a Go program, which the user of vkrt is not writing. It
// still matches both.
func noBackendWhy(err error) error {
	if !errors.Is(err, device.ErrNoBackend) {
		return err
	}
	if _, why := vk.Devices(); errors.Is(why, vk.ErrNoCgo) {
		return &noBackendError{why: why, err: err}
	}
	return err
}

type noBackendError struct{ why, err error }

func (e *noBackendError) Error() string   { return e.why.Error() }
func (e *noBackendError) Unwrap() []error { return []error{e.why, e.err} }
