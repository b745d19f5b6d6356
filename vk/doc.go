// Package vk is vkrt's Vulkan backend: it loads the system's Vulkan loader
// (libvulkan.so.1) at run time, lists the physical devices, and opens one as a
// [Device] that offers
//
//   - a [runtime.Storage] over device memory (one VkDeviceMemory with one
//     storage VkBuffer bound over all of it per page), safe for concurrent use,
//     with an optional memory limit and out-of-memory errors that carry the
//     heap's numbers;
//   - transfers between host memory and any byte range of a page (mapped when
//     the memory is host-visible, through a staging buffer when not);
//   - compute kernels compiled from the GLSL sources in vk/kernels, with a
//     catalogue ([Kernels]) describing their bindings, push constants and
//     work-group sizes, and dispatch checks ([ValidateDispatch]) that run
//     without touching a device.
//
// Nothing here needs the Vulkan development headers or libvulkan.so: only the
// loader package (Debian: libvulkan1) and a driver (Mesa's lavapipe in
// mesa-vulkan-drivers runs everything on the CPU).
package vk
