package konnectivity

import (
	"context"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// reloadLoop re-reads the files on each tick of ticker (every ReloadInterval).
func (m *Manager) reloadLoop(ctx context.Context, ticker clock.Ticker) {
	defer m.wg.Done()
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			m.reload()
		}
	}
}

// reload adopts changed, valid material; unusable content is logged and
// counted once per distinct content, and the last good material stays.
func (m *Manager) reload() {
	raw, readErr := readMaterial(m.opts)
	digest := raw.digest()
	m.mu.Lock()
	if digest == m.material.id {
		m.rejectedID = "" // fixed: the same bad content later is news again
	}
	unchanged := digest == m.material.id || digest == m.rejectedID
	m.mu.Unlock()
	if unchanged {
		return
	}
	mat, err := raw.parse(m.opts)
	if readErr != nil {
		err = readErr
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.rejectedID = digest
		m.rejectedReloads.Add(1)
		klog.ErrorS(err, "Ignoring unusable konnectivity client material; keeping the last good one until the files are fixed",
			"caFile", m.opts.CAFile, "certFile", m.opts.CertFile, "keyFile", m.opts.KeyFile, "keptID", m.material.id)
		return
	}
	m.material, m.rejectedID = mat, ""
	klog.InfoS("Konnectivity client material changed; building a tunnel from it", "id", mat.id)
	m.wake()
}
