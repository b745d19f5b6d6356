package environment

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The kill test re-executes the test binary as a writer; these variables tell
// the child where to write and where its numbering starts.
const (
	killChildDirVar   = "VKRT_ENV_TEST_KILL_DIR"
	killChildStartVar = "VKRT_ENV_TEST_KILL_START"
)

// payload is record seq's body: a few KiB so a write spans several pages and
// a kill can land in the middle of one.
func payload(seq int) sampleRecord {
	note := make([]byte, 6000)
	for i := range note {
		note[i] = 'a' + byte((seq*31+i)%26)
	}
	return sampleRecord{Seq: seq, Note: string(note)}
}

// runKillChild writes records forever, printing each sequence number once
// its Put has returned.
func runKillChild(dir string, start int) {
	env, err := Open("killed", WithDir(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for seq := start; ; seq++ {
		if _, err := env.Put(context.Background(), fmt.Sprintf("seq %d", seq), payload(seq)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Printf("ack %d\n", seq)
	}
}

func TestKillMidWrite(t *testing.T) {
	if dir := os.Getenv(killChildDirVar); dir != "" {
		start, err := strconv.Atoi(os.Getenv(killChildStartVar))
		require.NoError(t, err)
		runKillChild(dir, start)
		return
	}
	dir := t.TempDir()
	ctx := context.Background()
	stored := 0
	for round, killAfter := range []int{5, 23, 41} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillMidWrite$")
		cmd.Env = append(os.Environ(), killChildDirVar+"="+dir, killChildStartVar+"="+strconv.Itoa(stored))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(out)
		acknowledged := stored
		for lines.Scan() {
			text, ok := strings.CutPrefix(lines.Text(), "ack ")
			if !ok {
				continue // the test framework's own output
			}
			seq, err := strconv.Atoi(text)
			require.NoError(t, err)
			require.Equal(t, acknowledged, seq)
			acknowledged++
			if acknowledged-stored == killAfter {
				require.NoError(t, cmd.Process.Kill()) // SIGKILL: no chance to clean up
			}
		}
		err = cmd.Wait()
		require.Error(t, err, "round %d: the writer must have been killed", round)
		status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL,
			"round %d: the writer must have died of SIGKILL after %d records, not %v", round, killAfter, cmd.ProcessState)

		env, err := Open("killed", WithDir(dir))
		require.NoError(t, err, "round %d: the file must open after a kill", round)
		var check string
		require.NoError(t, env.db.QueryRow("PRAGMA integrity_check").Scan(&check))
		require.Equal(t, "ok", check)
		recs, err := QueryAs[sampleRecord](ctx, env, Query{})
		require.NoError(t, err)
		// Every acknowledged record is there; at most the one being written
		// when the kill landed may also have committed.
		require.GreaterOrEqual(t, len(recs), acknowledged, "round %d: acknowledged records lost", round)
		require.LessOrEqual(t, len(recs), acknowledged+1, "round %d", round)
		for i, r := range recs {
			require.Equal(t, fmt.Sprintf("seq %d", i), r.Label)
			require.Equal(t, payload(i), r.Value, "record %d damaged", i)
		}
		stored = len(recs)
		require.NoError(t, env.Close())
	}
}

func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	// Two handles on one file stand in for two processes.
	envs := make([]*Env, 2)
	for i := range envs {
		env, err := Open("shared", WithDir(dir))
		require.NoError(t, err)
		defer env.Close()
		envs[i] = env
	}
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := range writers {
		wg.Go(func() {
			env := envs[w%len(envs)]
			for i := range each {
				if _, err := env.Put(ctx, fmt.Sprintf("writer %d", w), sampleRecord{Seq: i, Note: strconv.Itoa(w)}); err != nil {
					errs <- err
					return
				}
				if _, err := env.Query(ctx, Query{Kind: "sample", LabelGlob: fmt.Sprintf("writer %d", w)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for w := range writers {
		recs, err := QueryAs[sampleRecord](ctx, envs[0], Query{LabelGlob: fmt.Sprintf("writer %d", w)})
		require.NoError(t, err)
		require.Len(t, recs, each)
		for i, r := range recs {
			require.Equal(t, i, r.Value.Seq, "writer %d's records are in the order it wrote them", w)
			require.Equal(t, strconv.Itoa(w), r.Value.Note)
		}
	}
}
