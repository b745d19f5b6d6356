//go:build cgo

package vk

import (
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// hostBuffer is a buffer in host-visible, coherent memory, mapped for its
// whole life: the staging buffer of devices whose storage the host cannot
// see, and the stand-in bound for empty bindings.
type hostBuffer struct {
	buffer vulkan.Buffer
	memory vulkan.DeviceMemory
	mapped unsafe.Pointer
	size   uint64
}

func (d *Device) newHostBuffer(size uint64) (*hostBuffer, error) {
	buf, err := d.createBuffer(size)
	if err != nil {
		return nil, err
	}
	req := d.calls.bufferRequirements(buf)
	chosen := -1
	for _, t := range d.info.MemoryTypes {
		if req.memoryTypeBits&(1<<uint(t.Index)) == 0 || !t.HostVisible || !t.HostCoherent {
			continue
		}
		if chosen < 0 || (t.HostCached && !d.info.MemoryTypes[chosen].HostCached) {
			chosen = t.Index // cached memory makes downloads fast
		}
	}
	if chosen < 0 {
		vulkan.DestroyBuffer(d.handle, buf, nil)
		return nil, fmt.Errorf("vk: device %d (%s) has no host-visible coherent memory for a %d B staging buffer", d.info.Index, d.info.Name, size)
	}
	memory, r := d.calls.allocateMemory(req.size, uint32(chosen))
	if r != vulkan.Success {
		vulkan.DestroyBuffer(d.handle, buf, nil)
		return nil, d.noteResult(fmt.Sprintf("vkAllocateMemory (staging, %d B)", req.size), r)
	}
	hb := &hostBuffer{buffer: buf, memory: memory, size: size}
	if r := vulkan.BindBufferMemory(d.handle, buf, memory, 0); r != vulkan.Success {
		hb.destroy(d.handle)
		return nil, d.noteResult("vkBindBufferMemory", r)
	}
	var mapped unsafe.Pointer
	if r := vulkan.MapMemory(d.handle, memory, 0, vulkan.DeviceSize(vulkan.WholeSize), 0, &mapped); r != vulkan.Success {
		hb.destroy(d.handle)
		return nil, d.noteResult("vkMapMemory", r)
	}
	hb.mapped = mapped
	return hb, nil
}

func (hb *hostBuffer) bytes() []byte { return unsafe.Slice((*byte)(hb.mapped), hb.size) }

func (hb *hostBuffer) destroy(dev vulkan.Device) {
	if hb.mapped != nil {
		vulkan.UnmapMemory(dev, hb.memory)
	}
	vulkan.DestroyBuffer(dev, hb.buffer, nil)
	vulkan.FreeMemory(dev, hb.memory, nil)
}

// stagingSize is the chunk a transfer through staging moves per submission.
const stagingSize = 16 << 20

// withStaging runs f with the device's staging buffer, made on first use.
func (d *Device) withStaging(f func(*hostBuffer) error) error {
	d.stagingMu.Lock()
	defer d.stagingMu.Unlock()
	if d.staging == nil {
		hb, err := d.newHostBuffer(stagingSize)
		if err != nil {
			return err
		}
		d.staging = hb
	}
	return f(d.staging)
}

func (p pinned) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(p.page.mapped, p.offset)), p.size)
}

// Upload writes data to the start of the byte range dst; len(data) may be
// less than dst.Size (the rest is left as it was), not more.
func (d *Device) Upload(ctx context.Context, dst vkruntime.StorageHandle, data []byte) error {
	if uint64(len(data)) > dst.Size {
		return fmt.Errorf("vk: upload of %d B into %v of %d B: %w", len(data), dst, dst.Size, vkruntime.ErrOutOfRange)
	}
	return d.transfer(ctx, dst, uint64(len(data)), func(p pinned) error {
		if p.page.mapped != nil {
			copy(p.bytes(), data)
			return nil
		}
		return d.withStaging(func(st *hostBuffer) error {
			for done := uint64(0); done < p.size; done += stagingSize {
				if err := ctx.Err(); err != nil {
					return err
				}
				n := min(stagingSize, p.size-done)
				copy(st.bytes(), data[done:done+n])
				if err := d.copyBuffer(st.buffer, 0, p.page.buffer, p.offset+done, n); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Download reads the start of the byte range src into dst; len(dst) may be
// less than src.Size, not more.
func (d *Device) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	if uint64(len(dst)) > src.Size {
		return fmt.Errorf("vk: download of %d B from %v of %d B: %w", len(dst), src, src.Size, vkruntime.ErrOutOfRange)
	}
	return d.transfer(ctx, src, uint64(len(dst)), func(p pinned) error {
		if p.page.mapped != nil {
			copy(dst, p.bytes())
			return nil
		}
		return d.withStaging(func(st *hostBuffer) error {
			for done := uint64(0); done < p.size; done += stagingSize {
				if err := ctx.Err(); err != nil {
					return err
				}
				n := min(stagingSize, p.size-done)
				if err := d.copyBuffer(p.page.buffer, p.offset+done, st.buffer, 0, n); err != nil {
					return err
				}
				copy(dst[done:done+n], st.bytes())
			}
			return nil
		})
	})
}

// Zero sets every byte of h to zero (how new buffers come to read as
// zeros).
func (d *Device) Zero(ctx context.Context, h vkruntime.StorageHandle) error {
	return d.transfer(ctx, h, h.Size, func(p pinned) error {
		if p.page.mapped != nil {
			clear(p.bytes())
			return nil
		}
		// vkCmdFillBuffer takes whole words at word offsets: the bytes
		// before the first and after the last are uploaded (3 at most
		// each, well inside the staging buffer).
		head := min((4-p.offset%4)%4, p.size)
		if head > 0 {
			if err := d.uploadPinned(vkruntime.StorageHandle{ID: p.page.id, Offset: p.offset, Size: head}, make([]byte, head)); err != nil {
				return err
			}
		}
		offset, left := p.offset+head, p.size-head
		aligned := left &^ 3
		if aligned > 0 {
			if err := d.fillBuffer(p.page.buffer, offset, aligned, 0); err != nil {
				return err
			}
		}
		if rest := left - aligned; rest > 0 {
			return d.uploadPinned(vkruntime.StorageHandle{ID: p.page.id, Offset: offset + aligned, Size: rest}, make([]byte, rest))
		}
		return nil
	})
}

// uploadPinned uploads into a range of a page the caller already pinned;
// data must fit the staging buffer.
func (d *Device) uploadPinned(h vkruntime.StorageHandle, data []byte) error {
	ps, err := d.storage.pin(h)
	if err != nil {
		return err
	}
	defer d.storage.unpin(ps)
	return d.withStaging(func(st *hostBuffer) error {
		copy(st.bytes(), data)
		return d.copyBuffer(st.buffer, 0, ps[0].page.buffer, h.Offset, uint64(len(data)))
	})
}

// Fill sets every 32-bit word of h to value; h's offset and size must be
// multiples of 4 (else an error matching runtime.ErrInvalidArgument).
func (d *Device) Fill(ctx context.Context, h vkruntime.StorageHandle, value uint32) error {
	if h.Offset%4 != 0 || h.Size%4 != 0 {
		return fmt.Errorf("vk: fill of %v: offset and size must be multiples of 4 B: %w", h, vkruntime.ErrInvalidArgument)
	}
	return d.transfer(ctx, h, h.Size, func(p pinned) error {
		if p.page.mapped != nil {
			b := p.bytes()
			for i := 0; i < len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], value)
			}
			return nil
		}
		return d.fillBuffer(p.page.buffer, p.offset, p.size, value)
	})
}

// Copy copies src's bytes to the start of dst (vkCmdCopyBuffer); the ranges
// may be on the same page but must not overlap.
func (d *Device) Copy(ctx context.Context, dst, src vkruntime.StorageHandle) error {
	return d.CopyBatch(ctx, []CopyPair{{Dst: dst, Src: src}})
}

// CopyPair is one copy of a batch: Src's bytes to the start of Dst.
type CopyPair struct{ Dst, Src vkruntime.StorageHandle }

// CopyBatch records the copies in order into one submission (each one's
// writes visible to the next) and waits for them. Every pair is checked, in
// order, before any is recorded: Dst and Src must lie in live pages,
// whether or not there are bytes to copy (runtime.ErrNotFound,
// runtime.ErrOutOfRange), and an empty handle (Size 0) names no page; then
// Src must fit into Dst (runtime.ErrOutOfRange) and not overlap it
// (runtime.ErrInvalidArgument).
func (d *Device) CopyBatch(ctx context.Context, pairs []CopyPair) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	var handles []vkruntime.StorageHandle
	var copies [][2]int // the indices in handles of each copy's Src and Dst
	for i, c := range pairs {
		src, dst := c.Src, c.Dst
		// The handles are looked up first: a released page is not found,
		// whatever else is wrong with the pair.
		named := make([]vkruntime.StorageHandle, 0, 2)
		if dst.Size > 0 {
			named = append(named, dst)
		}
		if src.Size > 0 {
			named = append(named, src)
		}
		if err := d.storage.check(named...); err != nil {
			return err
		}
		if src.Size > dst.Size {
			// A copy past its destination handle is a transfer past it.
			return fmt.Errorf("vk: copy %d: %v (%d B) does not fit into %v (%d B): %w", i, src, src.Size, dst, dst.Size, vkruntime.ErrOutOfRange)
		}
		if src.ID == dst.ID && src.Offset < dst.Offset+src.Size && dst.Offset < src.End() {
			return fmt.Errorf("vk: copy %d: %v into %v: the ranges overlap: %w", i, src, dst, vkruntime.ErrInvalidArgument)
		}
		if dst.Size > 0 {
			handles = append(handles, dst)
		}
		if src.Size > 0 {
			handles = append(handles, src)
			copies = append(copies, [2]int{len(handles) - 1, len(handles) - 2})
		}
	}
	if len(handles) == 0 {
		return nil
	}
	ps, err := d.storage.pin(handles...)
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		d.storage.unpin(ps)
		return nil
	}
	return d.submit(ctx, 0, func(c *submitContext) error {
		for i, cp := range copies {
			if i > 0 {
				d.calls.barrier(c.cmd)
			}
			src, dst := ps[cp[0]], ps[cp[1]]
			d.calls.copyBuffer(c.cmd, src.page.buffer, dst.page.buffer, src.offset, dst.offset, src.size)
		}
		return nil
	}, func() { d.storage.unpin(ps) })
}

// transfer pins h's page, checks h lies in it, and runs f on its first n
// bytes once abandoned work (which may use the page) has finished. With n
// 0 it only checks h; an empty h (Size 0) names no page.
func (d *Device) transfer(ctx context.Context, h vkruntime.StorageHandle, n uint64, f func(pinned) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	if h.Size == 0 {
		return nil
	}
	if n > 0 {
		if err := d.settle(ctx); err != nil {
			return err
		}
	}
	p, err := d.storage.pinOne(h)
	if err != nil {
		return err
	}
	defer d.storage.unpinOne(p)
	p.size = n
	if n == 0 {
		return nil
	}
	return f(p)
}

// copyBuffer and fillBuffer wait for their command whatever happens to the
// caller's context: the staging buffer and the pins they use are held by
// the caller, who releases them when they return. Staged transfers look at
// the context between chunks instead.
func (d *Device) copyBuffer(src vulkan.Buffer, srcOffset uint64, dst vulkan.Buffer, dstOffset, size uint64) error {
	return d.submit(context.Background(), 0, func(c *submitContext) error {
		d.calls.copyBuffer(c.cmd, src, dst, srcOffset, dstOffset, size)
		return nil
	}, nil)
}

func (d *Device) fillBuffer(dst vulkan.Buffer, offset, size uint64, value uint32) error {
	return d.submit(context.Background(), 0, func(c *submitContext) error {
		vulkan.CmdFillBuffer(c.cmd, dst, vulkan.DeviceSize(offset), vulkan.DeviceSize(size), value)
		return nil
	}, nil)
}
