// Package htmlreport draws what memory pools held over an allocation stream
// as one self-contained HTML page: inline SVG, a small inline script for
// reading exact values on hover, nothing fetched from the network.
//
// A trace is replayed twice over a counting storage, once under a layout
// without a plan (the default one unless told otherwise) and once under a
// plan (derived from the trace's own dry run, or one given), and after
// every event the pools' usage is read through the replay's observer. A
// chart draws at most [MaxPools] pools: a trace allocating on more streams
// than that is refused before it is replayed ([ErrTooManyPools]), and one
// whose streams have more pools in all is charted a stream a band, each
// stream's pools summed ([Run.ByStream]). Long streams are downsampled to one
// bucket of events per pixel column, keeping in each bucket the events where
// the totals reach their minimum and maximum and where each edge of the
// stacked pools peaks, so every peak on the page is the exact one. The page
// also charts an environment's memory records in the order they were
// written, in groups of records in a row past [MaxEnvBars] of them, each
// record's pools summed where they are more than [MaxPools] (in one record,
// or of more configurations in all).
package htmlreport
