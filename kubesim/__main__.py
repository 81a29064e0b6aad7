"""``python -m kubesim`` is the ``kubesim`` console script."""

from kubesim.cli import main

if __name__ == "__main__":
    main()
