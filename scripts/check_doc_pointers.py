"""Pointers in the docs and comments that users follow, checked against the tree:
- every relative Markdown link in the Markdown files resolves (a file or folder; #anchors name a heading there);
- every section named in quotes after README or a docs/ page ('README, "<section>"', 'docs/usage.md: "<section>"')
  is a heading of that file;
- every repository path in the user-facing files (README, docs/*.md, playbooks, requirements, galaxy.yml, the
  roles' defaults and argument specs, the inventories) exists, unless it is a placeholder (<...>, *, my-...).
Prints each broken pointer as FILE:LINE: what; exits 1 when there is one.
  python3 scripts/check_doc_pointers.py [REPO]"""
import glob
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# README, "Section" / README: "Section" / docs/usage.md, "Section" (across a line break too).
SECTION = re.compile(r"(README|docs/[\w-]+\.md)(?:\.md)?[,:]?\s+(?:section\s+)?[\"\u201c]([^\"\u201d]+)[\"\u201d]")
# This repository's paths (DeepEP's own tests/... are not).
PATH = re.compile(r"(?<![\w./-])((?:inventories|playbooks|roles|docs|plugins|requirements|scripts|molecule"
                  r"|tests/(?:unit|integration|fixtures|sanity))/[\w.@/<>*-]*[\w/>*])")
PLACEHOLDER = re.compile(r"<|\*|\{|my-|/results/[^/]*$|\.\.\.")
IAM_ROLE = re.compile(r"^roles/[a-z]+\.[A-Za-z]+$")  # roles/compute.osAdminLogin is GCP's, not a folder here


def anchor(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path):
    with open(path, encoding="utf-8") as handle:
        return [line.lstrip("#").strip() for line in handle if line.startswith("#")]


def user_files(repo):
    names = ["README.md", "galaxy.yml", "site.yml", "ansible.cfg"]
    for pattern in ("docs/*.md", "playbooks/*.yml", "playbooks/vars/*.yml", "requirements/*", "roles/*/defaults/*.yml",
                    "roles/*/meta/argument_specs.yml", "inventories/*/*.yml", "inventories/*/group_vars/*.yml"):
        names += sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, pattern)))
    return [n for n in names if os.path.isfile(os.path.join(repo, n))]


def repository_url(repo):
    """galaxy.yml's repository: links to <it>/blob/main/<path> (or tree/main) stand for <path> of this tree, so that
    they resolve inside the Galaxy artifact too, which leaves out the measured results."""
    try:
        with open(os.path.join(repo, "galaxy.yml"), encoding="utf-8") as handle:
            match = re.search(r"^repository:\s*(\S+)", handle.read(), re.M)
    except OSError:
        return None
    return match.group(1).rstrip("/") if match else None


def problems(repo, repository_links_local=True):
    """Every broken pointer. repository_links_local: a link to this repository's own URL is checked against the
    tree (in the artifact, which lacks those files, it is left to the web)."""
    found = []
    own = repository_url(repo)
    own_link = re.compile(r"^%s/(?:blob|tree)/main/(.+)$" % re.escape(own)) if own else None
    markdown = [os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, "*.md"))
                + glob.glob(os.path.join(repo, "docs", "**", "*.md"), recursive=True)]
    for name in sorted(set(markdown) | set(user_files(repo))):
        with open(os.path.join(repo, name), encoding="utf-8") as handle:
            text = handle.read()
        lines = text.splitlines()
        results = name.startswith("docs/results/")
        if not results:
            # YAML folds comments and messages: a section's name may start on one line and end on the next.
            flat = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
            for match in SECTION.finditer(flat):
                page = "README.md" if match.group(1) == "README" else match.group(1)
                if not os.path.isfile(os.path.join(repo, page)) or match.group(2) not in headings(
                        os.path.join(repo, page)):
                    found.append('%s: %s section "%s" does not exist' % (name, page, match.group(2)))
        for number, line in enumerate(lines, 1):
            where = "%s:%d" % (name, number)
            if name.endswith(".md"):
                for target in LINK.findall(line):
                    mine = own_link.match(target) if own_link else None
                    if re.match(r"^[a-z]+:", target) and not (mine and repository_links_local):
                        continue
                    path, frag = target.split("#", 1) if "#" in target else (target, "")
                    if mine:
                        full = os.path.join(repo, mine.group(1).split("#", 1)[0])
                    else:
                        full = os.path.normpath(os.path.join(repo, os.path.dirname(name), path)) if path else \
                            os.path.join(repo, name)
                    if not os.path.exists(full):
                        found.append("%s: link %s: no such file" % (where, target))
                    elif frag and full.endswith(".md") and frag not in [anchor(h) for h in headings(full)]:
                        found.append("%s: link %s: no such heading" % (where, target))
            if results:
                continue  # measured results are records of their day: their paths may have moved since
            for path in PATH.findall(LINK.sub("", line) if name.endswith(".md") else line):
                if PLACEHOLDER.search(path) or IAM_ROLE.match(path) or os.path.exists(os.path.join(repo, path)):
                    continue
                found.append("%s: %s does not exist" % (where, path))
    return found


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    found = problems(repo)
    for line in found:
        print(line)
    if found:
        print("%d broken pointer(s)" % len(found))
        return 1
    print("doc pointers: every link, README section and path resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
