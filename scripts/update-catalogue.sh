#!/bin/sh
# Refresh the message catalogues after changing student-facing text (grader/i18n.py explains them):
# extract every msgid (Python under grader/ and assignments/*/assignment.toml -> domain "grader", the report
# templates -> domain "report") into the .pot templates, then merge them into the zh_CN .po files. New
# messages arrive untranslated and changed ones fuzzy: translate them (and drop the `#, fuzzy` flag);
# tests/test_i18n.py fails until you have.
#   scripts/update-catalogue.sh            both domains
#   scripts/update-catalogue.sh grader     one domain (grader or report)
set -eu
cd "$(dirname "$0")/.."
PYBABEL="${PYBABEL:-.venv/bin/pybabel}"
LOCALES=grader/locales
for domain in ${1:-grader report}; do
    case "$domain" in
        grader) sources="grader assignments" ;;
        report) sources="reports/templates" ;;
        *) echo "unknown domain $domain (grader or report)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086 # sources is a list of folders
    "$PYBABEL" extract -F pyproject.toml --project=bang-grader --sort-by-file --width=110 \
        -o "$LOCALES/$domain.pot" $sources
    "$PYBABEL" update -D "$domain" -i "$LOCALES/$domain.pot" -d "$LOCALES" -l zh_CN --width=110 \
        --ignore-obsolete
done
