#!/bin/sh
# managed by sparkrack: pin NIC IRQs to the housekeeping cores.
# usage: sparkrack-irq-affinity PROC_ROOT MASK   (PROC_ROOT is /proc; tests pass a copy)
set -eu
proc=$${1:?proc root}
mask=$${2:?affinity mask}
pinned=0
for irq in $$(awk '/$pattern/ { sub(":", "", $$1); print $$1 }' "$$proc/interrupts"); do
  if printf '%s\n' "$$mask" > "$$proc/irq/$$irq/smp_affinity" 2>/dev/null; then
    pinned=$$((pinned + 1))
  else
    echo "irq $$irq: cannot set smp_affinity to $$mask" >&2
  fi
done
echo "pinned $$pinned IRQ(s) matching $pattern to $$mask"
