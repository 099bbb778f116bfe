package report

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cpuSplit is how the read section shares the machine: the store server
// on the first half of the CPUs this process may use, everything else
// (this process, the bench and mounts it starts, the peers) on the rest,
// as a cloud store serves from machines of its own. On shared CPUs every
// CPU second the server spends comes out of the readers' throughput.
type cpuSplit struct {
	server, client string // taskset lists
	clientSet      unix.CPUSet
}

// splitCPUs halves the CPUs this process may run on; false with fewer
// than two.
func splitCPUs() (cpuSplit, bool) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return cpuSplit{}, false
	}
	var cpus []int
	for i := range len(all) * 64 {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return cpuSplit{}, false
	}
	half := len(cpus) / 2
	var s cpuSplit
	for _, c := range cpus[half:] {
		s.clientSet.Set(c)
	}
	s.server, s.client = cpuList(cpus[:half]), cpuList(cpus[half:])
	return s, true
}

func (s cpuSplit) String() string {
	return fmt.Sprintf("store server on CPU %s, everything else on CPU %s", s.server, s.client)
}

func cpuList(cpus []int) string {
	l := make([]string, len(cpus))
	for i, c := range cpus {
		l[i] = strconv.Itoa(c)
	}
	return strings.Join(l, ",")
}

// pinSelf confines every thread of this process to set (threads made
// later inherit it, and so do the children started meanwhile) and
// returns what puts the old mask back.
func pinSelf(set unix.CPUSet) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("reading this process's CPU affinity: %w", err)
	}
	if err := setAllThreads(set); err != nil {
		_ = setAllThreads(old)
		return nil, err
	}
	return func() { _ = setAllThreads(old) }, nil
}

// setAllThreads sets the affinity of each of this process's threads; a
// thread made while it runs inherits from its maker, so a second pass
// catches those made from a thread the first had not reached.
func setAllThreads(set unix.CPUSet) error {
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("listing this process's threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("setting the CPU affinity of thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
