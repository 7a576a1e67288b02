#!/usr/bin/env bash
# What stormguard adds to a firmware: flash and RAM, from three builds of one image.
#
#   bash firmware/size-report.sh
#
# firmware/size-probe reads a sensor once a second, on embassy (executor + SysTick time driver),
# for thumbv7em-none-eabihf, release, opt-level "s", LTO. It is built three ways that differ only
# in how the read is made: unguarded (the baseline), through a policy with a consecutive-only
# breaker and a retry budget, and through a policy with a default breaker (every default rule)
# and a retry budget. llvm-size gives each image's sections; flash is .text + .rodata and RAM is
# .data + .bss, and the added figures are differences from the baseline. Then the `sizes`
# binary prints `size_of` of each shared object, as laid out on a Cortex-M4, under QEMU.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/size-probe"

TARGET=thumbv7em-none-eabihf
HOST=$(rustc -vV | sed -n 's/^host: //p')
LLVM_SIZE="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-size"
if [[ ! -x $LLVM_SIZE ]]; then
    echo "llvm-size not found: rustup component add llvm-tools" >&2
    exit 1
fi
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT="$TARGET_DIR/size-report"
mkdir -p "$OUT"

# Flash/RAM goals from the issue: under 8 KiB of flash added; under 1 KiB of RAM per breaker
# with every default rule, under 64 B consecutive-only (`size_of`, below).
FLASH_GOAL=8192

VARIANTS=(baseline guard-consecutive guard-full)
declare -A TEXT RODATA DATA BSS

section() { # section ELF NAME -> bytes (0 when absent)
    "$LLVM_SIZE" -A "$1" | awk -v s="$2" '$1 == s { print $2; found = 1 } END { if (!found) print 0 }'
}

for v in "${VARIANTS[@]}"; do
    features=()
    [[ $v != baseline ]] && features=(--features "$v")
    cargo build --locked --release --quiet --bin stormguard-size-probe "${features[@]}"
    cp "$TARGET_DIR/$TARGET/release/stormguard-size-probe" "$OUT/$v.elf"
    TEXT[$v]=$(section "$OUT/$v.elf" .text)
    RODATA[$v]=$(section "$OUT/$v.elf" .rodata)
    DATA[$v]=$(section "$OUT/$v.elf" .data)
    BSS[$v]=$(section "$OUT/$v.elf" .bss)
done

echo "llvm-size -A, $TARGET, release, opt-level \"s\", LTO (bytes):"
printf '  %-18s %7s %7s %7s %7s | %7s %7s | %11s %9s\n' \
    image .text .rodata .data .bss flash RAM "flash added" "RAM added"
b=baseline
base_flash=$((TEXT[$b] + RODATA[$b]))
base_ram=$((DATA[$b] + BSS[$b]))
status=0
for v in "${VARIANTS[@]}"; do
    flash=$((TEXT[$v] + RODATA[$v]))
    ram=$((DATA[$v] + BSS[$v]))
    if [[ $v == baseline ]]; then
        added_flash=- added_ram=-
    else
        added_flash=$((flash - base_flash))
        added_ram=$((ram - base_ram))
    fi
    printf '  %-18s %7d %7d %7d %7d | %7d %7d | %11s %9s\n' \
        "$v" "${TEXT[$v]}" "${RODATA[$v]}" "${DATA[$v]}" "${BSS[$v]}" "$flash" "$ram" \
        "$added_flash" "$added_ram"
    if [[ $v != baseline ]]; then
        if ((added_flash < FLASH_GOAL)); then
            echo "    $v: flash added $added_flash B: under the 8 KiB goal"
        else
            echo "    $v: flash added $added_flash B: OVER the 8 KiB goal"
        fi
    fi
done
echo "  (RAM added = the breaker, the budget and the policy in statics, plus the larger task"
echo "   future that holds the call's state while it awaits)"

echo
echo "size_of on $TARGET (Cortex-M4 under QEMU mps2-an386):"
cargo build --locked --release --quiet --bin sizes
timeout 60 qemu-system-arm -cpu cortex-m4 -machine mps2-an386 -nographic \
    -semihosting-config enable=on,target=native \
    -kernel "$TARGET_DIR/$TARGET/release/sizes" 2>/dev/null | sed 's/^/  /'
exit $status
