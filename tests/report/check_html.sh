#!/bin/sh
# check_html.sh MODE TP_PLAN CONFIG OUT_DIR [EXTRA...]: writes the HTML report of `tp-plan search CONFIG` (or of
# `tp-plan simulate CONFIG EXTRA` when EXTRA is given) and checks it:
#   MODE xml      well-formed XHTML (xmllint --noout), self-contained (no http(s) reference, no <script>), and the
#                 parts present (the candidates' chart for a search, the bars, the timeline, the memory chart);
#   MODE chromium headless Chromium loads it without a console error and writes a non-empty screenshot.
# Exit 77 (ctest's SKIP_RETURN_CODE) with one line when the tool a mode needs is absent.
mode="$1"; tp_plan="$2"; config="$3"; out="$4"; shift 4
mkdir -p "$out" || exit 1
html="$out/report-$mode.html"
if [ $# -gt 0 ]; then
  "$tp_plan" simulate "$config" "$@" --report "$html" > "$out/stdout-$mode.txt" || exit 1
  kind=simulate
else
  "$tp_plan" search "$config" --report "$html" > "$out/stdout-$mode.txt" || exit 1
  kind=search
fi
[ -s "$html" ] || { echo "check_html: $html is empty"; exit 1; }
case "$mode" in
  xml)
    command -v xmllint > /dev/null || { echo "SKIP: xmllint not installed (Debian: libxml2-utils)"; exit 77; }
    xmllint --noout "$html" || { echo "check_html: $html is not well-formed XML"; exit 1; }
    if grep -o -E '<script|(src|href)="[^"]*"|url\(' "$html" | grep -q .; then
      echo "check_html: $html loads something (script, src, href or url()): it must be self-contained"; exit 1
    fi
    for part in "Where the time goes" "One block of " "Memory per GPU at the peak" "ms per 1000 tokens per GPU" \
                "GiB per GPU"; do
      grep -q "$part" "$html" || { echo "check_html: '$part' missing from $html"; exit 1; }
    done
    if [ "$kind" = search ]; then
      for part in "Every evaluated candidate" "peak memory per GPU (GiB)" "throughput (tokens/s per GPU)" \
                  "memory limit" "Pareto front" "torchtitan default"; do
        grep -q "$part" "$html" || { echo "check_html: '$part' missing from $html"; exit 1; }
      done
    fi
    echo "check_html: $html is well-formed and self-contained ($(wc -c < "$html") bytes)";;
  chromium)
    browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome) ||
      { echo "SKIP: chromium not installed (Debian: chromium)"; exit 77; }
    png="$out/report-$mode.png"
    rm -f "$png"
    log=$(timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=900,2400 \
          --enable-logging=stderr --v=0 --screenshot="$png" "file://$(realpath "$html")" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { printf '%s\n' "$log"; echo "check_html: chromium exited with $rc"; exit 1; }
    [ -s "$png" ] || { printf '%s\n' "$log"; echo "check_html: no screenshot written"; exit 1; }
    # Console messages of the page ("CONSOLE" lines) are errors for a page without script: none expected.
    if printf '%s\n' "$log" | grep -E 'CONSOLE|Uncaught|ERR_FILE|net::ERR' ; then
      echo "check_html: chromium reported errors loading $html"; exit 1
    fi
    echo "check_html: chromium rendered $html to $png ($(wc -c < "$png") bytes)";;
  *) echo "check_html: unknown mode $mode"; exit 2;;
esac
