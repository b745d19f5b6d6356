package conformance

import (
	"context"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// deviceStorage is the storage target of a client's device: the storage
// the client's pools use (held to its memory limit), the client's
// properties and the device's transfers.
func deviceStorage(cl *client.Client) StorageTarget {
	s := cl.Storage()
	return StorageTarget{Storage: s, Properties: cl.Properties(), Memory: deviceMemory{cl.Device()}, Held: s.Allocated}
}

// deviceMemory is a device's transfers as Memory: each one runs to its end.
type deviceMemory struct{ d device.Device }

func (m deviceMemory) Upload(dst vkruntime.StorageHandle, data []byte) error {
	return m.d.Upload(context.Background(), dst, data)
}

func (m deviceMemory) Download(src vkruntime.StorageHandle, dst []byte) error {
	return m.d.Download(context.Background(), src, dst)
}

// deviceName names the client's device in a report.
func deviceName(cl *client.Client) string { return cl.Device().Name() }
