//go:build !cgo

package devtest

const cgoBuild = false
