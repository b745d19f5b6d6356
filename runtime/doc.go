// Package runtime is vkrt's device-independent contract: the [Storage] a
// device offers the memory pools, the [DeviceProperties] the pools size
// themselves by, and the error kinds every layer classifies with
// [errors.Is] and [errors.As]. Every device (vk's, device/cpu's) refuses
// the same input with the same kind: what is missing ([ErrNotFound]), past
// its allocation ([ErrOutOfRange]), wrong in itself ([ErrInvalidArgument],
// [ErrZeroSize], [ErrOverlappingBinds]) or beyond the device
// ([ErrUnsupported], [ErrOutOfDeviceMemory]).
//
// It shares its name with the standard library's runtime package; import it
// as vkruntime where both are needed.
package runtime
