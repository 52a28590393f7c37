"""Replaced-token detection you can see: the discriminator's p(replaced) for every wordpiece.

`python -m electra_tf.detect --init_checkpoint=CKPT "some text" ...` tokenises each
text as one segment (`[CLS] wordpieces [SEP]`, truncated to `--max_seq_length`),
runs the pre-trained discriminator and prints every wordpiece with the
probability that the discriminator gives to "this token was replaced":

* on a terminal, each token on a background shaded from white (0) to red (1)
  (ANSI 256 colours; `--color=auto|always|never`, `NO_COLOR` is honoured);
* when piped (or `--color=never`), plain text `token(0.93)`, one line per text,
  or an aligned table with `--table`;
* `--html out.html` writes a self-contained page with the same shading (each
  token a `<span>` whose tooltip holds its probability).

`--corrupt` first lets the checkpoint's generator replace tokens the way
pre-training does (`electra_tf.model.masking`: `mask_inputs` picks `--mask_prob` of
the tokens, 85 % of them shown as [MASK]; `sample_tokens` draws from the
generator at `--temperature`; `corrupt` writes the samples in), reproducibly
from `--seed`. Tokens that really changed are marked, with the original shown.

`CKPT` is anything `electra_tf.convert` loads: an export directory of ours
(`electra_config.json` + `pretrainer.weights.h5`), a Hugging Face folder
(`discriminator/` + `generator/`, or a discriminator folder with
`--generator_checkpoint`), or an official TF1 checkpoint (`model.ckpt-N`). The
vocabulary is `--vocab_file`, else the tokenizer the checkpoint carries: a WordPiece
`vocab.txt` or a SentencePiece model (`electra_tf.text.tokenizers.load_tokenizer` picks by the
file); WordPiece lower-casing follows a Hugging Face `tokenizer_config.json` when there is one,
else `--[no]do_lower_case` (default: lower-case), a SentencePiece model normalises as it was
built. Pieces are shown as the model scores them, their marks included (`##` before a WordPiece
continuation, `▁` before a SentencePiece word start; the HTML page draws a piece inside a word
attached to it without its mark, each piece with its own shade and tooltip); [CLS]/[SEP] are
scored but not shown. Bad input exits with status 2 and a one-line error naming the
flag.

Modules: `scoring` (`TokenScores`, `score_texts`), `rendering` (terminal and HTML), `loading`
(`load_detector`: any checkpoint `electra_tf.convert` reads), `cli` (`main`), `errors` (`UsageError`);
`__main__` runs `cli.main`. Importing the package imports nothing (no TensorFlow before the entry point's
`use_onednn_kernels()`).

Example (the CLI, then the library on a hand-made result):

>>> from electra_tf.detect.cli import main
>>> from electra_tf.detect.rendering import render_html, render_terminal
>>> from electra_tf.detect.scoring import TokenScores
>>> main(["--init_checkpoint=runs/small/export", "the chef cooked the meal"])  # doctest: +SKIP
>>> scores = TokenScores(text="the chef ate the meal", tokens=["the", "chef", "ate", "the", "meal"],
...                      probs=[0.02, 0.05, 0.91, 0.03, 0.10],
...                      originals=[None, None, "cooked", None, None])
>>> print(render_terminal([scores], color=False))
# 1: the chef ate the meal  (1 of 5 replaced)
the(0.02) chef(0.05) ate(0.91)[was:cooked] the(0.03) meal(0.10)
>>> print(render_terminal([scores], color=False, table=True))
# 1: the chef ate the meal  (1 of 5 replaced)
  pos  token  p(replaced)                        replaced  original
    1  the           0.02
    2  chef          0.05  #
    3  ate           0.91  ##################    yes       cooked
    4  the           0.03  #
    5  meal          0.10  ##
>>> "\\x1b[48;5;" in render_terminal([scores], color=True)  # ANSI background colours
True
>>> page = render_html([scores])
>>> '<span class="tok replaced" style="background:rgb(223,50,50)"' in page, 'title="p(replaced) = 0.910' in page
(True, True)
"""
