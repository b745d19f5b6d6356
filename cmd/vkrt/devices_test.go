package main

import (
	"bufio"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/vk"
)

// devicesOrSkip lists the Vulkan devices, skipping the test where there are
// none unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func devicesOrSkip(t *testing.T) []vk.DeviceInfo {
	t.Helper()
	infos, err := vk.Devices()
	devtest.SkipUnavailable(t, err)
	return infos
}

func executeDevices(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := execute(t, "devices", args...)
	return out + errOut, err
}

func TestDevicesJSONOneObjectPerDevice(t *testing.T) {
	want := devicesOrSkip(t)
	out, err := executeDevices(t, "--json")
	require.NoError(t, err)
	var got []vk.DeviceInfo
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "each line is one JSON object: %s", sc.Text())
		for _, key := range []string{"name", "type", "heaps", "memory_types", "limits", "memory_budget", "sparse_residency"} {
			require.Contains(t, line, key)
		}
		var info vk.DeviceInfo
		require.NoError(t, json.Unmarshal(sc.Bytes(), &info))
		got = append(got, info)
	}
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].Name, got[i].Name)
		require.Equal(t, i, got[i].Index)
		require.Equal(t, want[i].Limits.MinStorageBufferOffsetAlignment, got[i].Limits.MinStorageBufferOffsetAlignment)
		require.Equal(t, len(want[i].Heaps), len(got[i].Heaps))
		require.NotZero(t, got[i].Heaps[0].Size)
	}
}

func TestDevicesTextNamesHeapsAndLimits(t *testing.T) {
	want := devicesOrSkip(t)
	out, err := executeDevices(t)
	require.NoError(t, err)
	for _, d := range want {
		require.Contains(t, out, d.Name)
	}
	require.Contains(t, out, "heap 0:")
	require.Contains(t, out, "alignment ")
	require.Contains(t, out, "max storage buffer range")
	require.Equal(t, len(want), strings.Count(out, "  sparse residency: "), "every device says whether it binds sparse memory")
	require.Equal(t, len(want), strings.Count(out, "\ndevice ")+1, "one block per device")
}

// Each heap of a device with VK_EXT_memory_budget has its budget and usage
// in --json, 0 B too (what a process that has allocated nothing uses), and
// a device without the extension has neither: a usage of 0 was left out,
// as if the device had no budget to report.
func TestDevicesJSONGivesEveryHeapsBudgetWhereThereIsOne(t *testing.T) {
	infos := []vk.DeviceInfo{
		{Index: 0, Name: "with budget", MemoryBudget: true, Heaps: []vk.HeapInfo{
			{Index: 0, Size: 80 << 30, DeviceLocal: true, Budget: 70 << 30, Usage: 0},
			{Index: 1, Size: 64 << 30, Budget: 0, Usage: 0}}},
		{Index: 1, Name: "without", Heaps: []vk.HeapInfo{{Index: 0, Size: 2 << 30, DeviceLocal: true}}},
	}
	var out strings.Builder
	require.NoError(t, writeDevicesJSON(&out, infos))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	for i, line := range lines {
		var dev struct {
			MemoryBudget bool             `json:"memory_budget"`
			Heaps        []map[string]any `json:"heaps"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &dev), line)
		require.Len(t, dev.Heaps, len(infos[i].Heaps))
		for k, h := range dev.Heaps {
			for _, key := range []string{"budget", "usage"} {
				if infos[i].MemoryBudget {
					require.Contains(t, h, key, "%s heap %d: %s", infos[i].Name, k, line)
				} else {
					require.NotContains(t, h, key, "%s heap %d: %s", infos[i].Name, k, line)
				}
			}
		}
		var back vk.DeviceInfo
		require.NoError(t, json.Unmarshal([]byte(line), &back))
		require.Equal(t, infos[i], back, "the line reads back as the device")
	}
}

// A count in the text agrees with its noun: a device of one invocation a
// work group read "(1 invocations)".
func TestDevicesTextCountsAgreeWithTheirNouns(t *testing.T) {
	var b strings.Builder
	info := vk.DeviceInfo{Name: "one", Limits: vk.DeviceLimits{MaxComputeWorkGroupInvocations: 1}}
	require.NoError(t, writeDevicesText(&b, []vk.DeviceInfo{info}))
	require.Contains(t, b.String(), "(1 invocation),")
	info.Limits.MaxComputeWorkGroupInvocations = 1024
	b.Reset()
	require.NoError(t, writeDevicesText(&b, []vk.DeviceInfo{info}))
	require.Contains(t, b.String(), "(1024 invocations),")
}
