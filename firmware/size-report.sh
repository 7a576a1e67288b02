#!/usr/bin/env bash
# What stormguard adds to a firmware: flash and RAM, from builds of one image, and where the
# flash goes.
#
#   bash firmware/size-report.sh
#
# firmware/size-probe reads a sensor once a second, on embassy (executor + SysTick time driver),
# for thumbv7em-none-eabihf, release, opt-level "s", LTO. It is built in variants that differ
# only in how the read is made: unguarded (the baseline); through a policy with a lean breaker
# (consecutive failures only, settings in a static) and a retry budget, without and with a
# listener (without one, and without defmt, no event is made); through a policy with a
# full breaker over the default settings (every default rule) in a static and a retry budget;
# and the same with a breaker owning its copy of the settings. llvm-size gives each image's
# sections; flash is .text + .rodata (plus .data's initial image, which is also stored in flash)
# and RAM is .data + .bss; the added figures are differences from the baseline.
#
# Then, for the lean and full images, where the added flash goes: every byte of .text is
# attributed (llvm-objdump for the instructions, addr2line for the inlining chain at each one) to
# the innermost function it was inlined from that is not core/alloc or primitive-integer plumbing
# (so a u64 multiply counts for the stormguard function that wrote it), summed by module and by
# function; and the largest symbols llvm-nm sees that the baseline lacks. addr2line (binutils)
# is optional: without it only the symbols are listed.
#
# Last, the `sizes` binary prints `size_of` of each shared object, as laid out on a Cortex-M4,
# under QEMU.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/size-probe"

TARGET=thumbv7em-none-eabihf
HOST=$(rustc -vV | sed -n 's/^host: //p')
LLVM_BIN="$(rustc --print sysroot)/lib/rustlib/$HOST/bin"
LLVM_SIZE="$LLVM_BIN/llvm-size"
LLVM_NM="$LLVM_BIN/llvm-nm"
LLVM_OBJDUMP="$LLVM_BIN/llvm-objdump"
for tool in "$LLVM_SIZE" "$LLVM_NM" "$LLVM_OBJDUMP"; do
    if [[ ! -x $tool ]]; then
        echo "$(basename "$tool") not found: rustup component add llvm-tools" >&2
        exit 1
    fi
done
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT="$TARGET_DIR/size-report"
mkdir -p "$OUT"

# Flash/RAM goals from the issue: under 8 KiB of flash added; under 1 KiB of RAM per breaker
# with every default rule, under 64 B consecutive-only (`size_of`, below).
FLASH_GOAL=8192

VARIANTS=(baseline guard-lean guard-lean-heard guard-full guard-owned guard-fixed)
declare -A WHAT=(
    [baseline]="unguarded read"
    [guard-lean]="lean breaker (consecutive-only, static settings) + budget + policy"
    [guard-lean-heard]="the same with a listener (a fn counting the events)"
    [guard-full]="full breaker (default rules, static settings) + budget + policy"
    [guard-owned]="full breaker (default rules, own settings) + budget + policy"
    [guard-fixed]="full breaker (default rules, settings a constant by type) + budget + policy"
)
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
printf '  %-16s %6s %7s %6s %5s | %6s %5s | %11s %11s %9s\n' \
    image .text .rodata .data .bss flash RAM "flash added" "+.data img" "RAM added"
b=baseline
base_flash=$((TEXT[$b] + RODATA[$b]))
base_ram=$((DATA[$b] + BSS[$b]))
for v in "${VARIANTS[@]}"; do
    flash=$((TEXT[$v] + RODATA[$v]))
    ram=$((DATA[$v] + BSS[$v]))
    if [[ $v == baseline ]]; then
        added_flash=- added_image=- added_ram=-
    else
        added_flash=$((flash - base_flash))
        added_image=$((added_flash + DATA[$v] - DATA[$b]))
        added_ram=$((ram - base_ram))
    fi
    printf '  %-16s %6d %7d %6d %5d | %6d %5d | %11s %11s %9s\n' \
        "$v" "${TEXT[$v]}" "${RODATA[$v]}" "${DATA[$v]}" "${BSS[$v]}" "$flash" "$ram" \
        "$added_flash" "$added_image" "$added_ram"
done
for v in "${VARIANTS[@]}"; do
    [[ $v == baseline ]] && continue
    added_flash=$((TEXT[$v] + RODATA[$v] - base_flash))
    verdict="OVER"
    ((added_flash < FLASH_GOAL)) && verdict="under"
    printf '  %-16s %s: %d B of flash added, %s the 8 KiB goal\n' \
        "$v" "${WHAT[$v]}" "$added_flash" "$verdict"
done
echo "  (flash added = .text + .rodata; +.data img adds the statics' initial values, which"
echo "   are stored in flash too. RAM added = the breaker, the budget and the policy in"
echo "   statics, plus the larger task future that holds the call's state while it awaits)"

# owners ELF DEPTH: "BYTES<tab>OWNER" for the .text of ELF, each instruction's bytes going to the
# innermost inlined frame that is not plumbing (core::, alloc::, methods of primitive types),
# except core's fmt and panic machinery, which is reported as itself. DEPTH 2 cuts the owner
# to its crate and module (stormguard_core::breaker); 0 keeps the whole function name.
owners() {
    "$LLVM_OBJDUMP" -d --no-show-raw-insn "$1" |
        awk '/^ *[0-9a-f]+:/ { a = $1; sub(/:$/, "", a); print "0x" a }' |
        addr2line -e "$1" -a -f -i -C |
        awk -v depth="$2" '
        function hex(s,   i, n) {
            n = 0
            s = tolower(substr(s, 3))
            for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
            return n
        }
        function plumbing(f) {
            if (f ~ /^<?core::(fmt|panicking|num::fmt|cell::panic)/) return 0
            return f ~ /^<?(core::|alloc::|&|\*|\[|[ui](8|16|32|64|128|size)[>: ]|bool|char)/
        }
        function owner(f,   n, p) {
            sub(/::h[0-9a-f]+$/, "", f)
            if (depth == 0) return f
            sub(/^</, "", f)
            n = split(f, p, "::")
            return n >= 2 ? p[1] "::" p[2] : p[1]
        }
        /^0x[0-9a-f]+$/ {
            # The bytes up to this address belong to the previous instruction; a chain that is all
            # plumbing goes to its innermost frame.
            at = hex($0)
            if (key == "" && first != "") key = owner(first)
            if (key != "") bytes[key] += at - last
            last = at; key = ""; first = ""; line = 0
            next
        }
        {
            line++
            if (line % 2 == 0) next  # file:line
            if (first == "") first = $0
            if (key == "" && !plumbing($0)) key = owner($0)
        }
        END { for (k in bytes) printf "%d\t%s\n", bytes[k], k }
        ' | awk -F '\t' '$2 != "" { print }'
}

# first N: the first N lines of the input, reading all of it (`head` would exit early and, under
# pipefail, fail the pipeline with SIGPIPE whenever the writer is still writing).
first() {
    awk -v n="$1" 'NR <= n'
}

# added VARIANT DEPTH N: the N largest owners of flash in VARIANT beyond the baseline's.
added() {
    local v=$1 depth=$2 n=$3
    awk -F '\t' 'NR == FNR { base[$2] = $1; next } { d = $1 - base[$2]; if (d != 0) printf "%6d  %s\n", d, $2 }' \
        <(owners "$OUT/baseline.elf" "$depth") <(owners "$OUT/$v.elf" "$depth") |
        sort -rn | first "$n"
}

# unescape: the $LT$-style escapes of legacy-mangled Rust names, which llvm-nm leaves in.
unescape() {
    sed -e 's/\$LT\$/</g; s/\$GT\$/>/g; s/\$C\$/,/g; s/\$RF\$/\&/g; s/\$BP\$/*/g' \
        -e 's/\$u20\$/ /g; s/\$u7b\$/{/g; s/\$u7d\$/}/g; s/\$u27\$/'"'"'/g; s/\.\./::/g' \
        -e 's/\t_</\t</'
}

# symbols VARIANT N: the N largest code and read-only symbols of VARIANT absent from the baseline.
symbols() {
    local v=$1 n=$2
    syms() { "$LLVM_NM" --print-size --size-sort --radix=d -C "$1" | awk '$3 ~ /^[tTrR]$/ { s = $2 + 0; $1 = $2 = $3 = ""; sub(/^ +/, ""); sub(/::h[0-9a-f]+$/, ""); print s "\t" $0 }' | unescape; }
    awk -F '\t' 'NR == FNR { base[$2] = 1; next } !($2 in base) { printf "%6d  %s\n", $1, $2 }' \
        <(syms "$OUT/baseline.elf") <(syms "$OUT/$v.elf") | sort -rn | first "$n"
}

# memcpy VARIANT: whether VARIANT links compiler-builtins' memcpy (about 0.9 KB with its aligned
# entry points), and which functions call it: a move of anything over 64 bytes (the call's
# state, a future) that the optimiser did not build in place.
memcpy_callers() {
    "$LLVM_OBJDUMP" -d --no-show-raw-insn "$OUT/$1.elf" |
        awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 }
             /\tb(l|\.w)?\t.*<(__aeabi_)?mem(cpy|move)/ && fn !~ /mem(cpy|move)/ { print fn }' |
        sort -u
}

echo
for v in "${VARIANTS[@]}"; do
    [[ $v == baseline ]] && continue
    callers=$(memcpy_callers "$v")
    if [[ -z $callers ]]; then
        printf '  %-16s memcpy: not linked\n' "$v"
    else
        printf '  %-16s memcpy: linked, called from %s\n' "$v" "$(echo $callers | tr -d '<>:')"
    fi
done

for v in guard-lean guard-full; do
    echo
    echo "where the flash of $v goes (${WHAT[$v]}):"
    if command -v addr2line >/dev/null; then
        echo "  .text added, by module (inlined code counted where it was written):"
        added "$v" 2 16 | sed 's/^/    /'
        echo "  .text added, by function (the same attribution):"
        added "$v" 0 16 | sed 's/^/    /'
    else
        echo "  (addr2line not found, from binutils: attribution of inlined code skipped)"
    fi
    echo "  largest symbols not in the baseline (llvm-nm --size-sort):"
    symbols "$v" 12 | sed 's/^/    /'
done

echo
echo "size_of on $TARGET (Cortex-M4 under QEMU mps2-an386):"
cargo build --locked --release --quiet --bin sizes
timeout 60 qemu-system-arm -cpu cortex-m4 -machine mps2-an386 -nographic \
    -semihosting-config enable=on,target=native \
    -kernel "$TARGET_DIR/$TARGET/release/sizes" 2>/dev/null | sed 's/^/  /'
