# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Cache de prefixo: pré-preencha uma única vez um prefixo compartilhado
#
# **Objetivo de aprendizagem.** Ao final deste notebook você saberá executar a receita de cache de prefixo do guia do
# transformers (pré-preencher um `StaticCache` dentro de `torch.no_grad()` e depois fazer `copy.deepcopy` dele para
# cada pergunta), dizer quanto cada cópia custa em memória para um `StaticCache` e para um `DynamicCache`, medir
# quanto a reutilização economiza no tempo até o primeiro token (e que parte desse tempo a cópia profunda consome) e
# verificar, id por id, a condição de que a reutilização precisa para continuar certa: os ids de token do prefixo têm
# de ser os primeiros ids do prompt inteiro (o próprio prefixo do guia passa por esse teste).
#
# **Nas palavras do kvlab.** Muitos prompts começam do mesmo jeito. As chaves e os valores desse início comum não
# dependem do que vem depois, então podem ser calculados uma única vez. Gerar dentro de um cache o modifica, por isso
# cada pergunta recebe sua própria cópia profunda (deep copy) do cache pré-preenchido; assim, `generate` só precisa
# executar a parte do prompt que a cópia ainda não contém. Isso só dá certo se os ids de token do prefixo forem
# exatamente os primeiros ids do prompt completo, e concatenar duas strings não garante isso.
#
# SmolLM2-135M-Instruct, decodificação greedy, CPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import copy
import os
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, StaticCache

import kvlab
from kvlab.i18n import number
from kvlab.live import live
from kvlab.measure import timing
from kvlab.plots.prefill_bars import plot_prefill_bars
from kvlab.plots.prefix import plot_prefix_copies, plot_token_prefix
from kvlab.measure.prefix import cache_bytes, check_token_prefix, time_first_token, token_prefix
from kvlab.models import load_config_and_tokenizer
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
transformers.logging.set_verbosity_error()  # o mesmo aviso, registrado uma vez pelo transformers
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
SHOP = (
    "You answer questions for Wheelwright, a small bicycle repair shop, in one short sentence.\n"
    "Opening hours: Monday to Friday 9:00 to 18:00, Saturday 10:00 to 14:00, closed on Sundays and holidays.\n"
    "Prices: replacing an inner tube costs 12 euros and takes 20 minutes. Truing a wheel costs 18 euros. "
    "Brake pads cost 15 euros per pair, fitting included. A full service costs 65 euros and takes one day.\n"
    "We sell city bikes and cargo bikes, but no electric bikes. We rent cargo bikes for 30 euros a day.\n"
    "Payment by card or cash. Repairs are guaranteed for three months.\n"
)  # termina numa quebra de linha: uma fronteira de token (a seção 4 mostra por que isso importa)
QUESTIONS = [
    "Question: How much does it cost to replace an inner tube?\nAnswer:",
    "Question: Do you sell electric bikes?\nAnswer:",
    "Question: Are you open on Sunday?\nAnswer:",
]
NEW_TOKENS = 8
MAX_CACHE_LEN = 224  # espaço para o prefixo, a pergunta mais longa e sua resposta
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # encurta as execuções cronometradas na CI; as saídas verificadas valem de qualquer forma
REPEATS = 3 if QUICK else 7  # as execuções cronometradas são repetidas e intercaladas; os tempos são medianas com sua dispersão

# %% [markdown]
# ## 1. Preencher um cache (cache de prefixo)
#
# A receita do guia, aplicada ao texto da loja: crie um `StaticCache` grande o bastante para prefixo + pergunta +
# resposta, execute um forward sobre o prefixo sem gradientes (para que os tensores do cache possam ser copiados em
# profundidade) e então, para cada pergunta, tokenize o prompt *inteiro* (prefixo + pergunta), faça uma cópia profunda
# do cache pré-preenchido e passe a cópia para `generate` como `past_key_values=`.

# %%
prompt_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
inputs = tokenizer(SHOP, return_tensors="pt")
with torch.no_grad():
    output = model(**inputs, past_key_values=prompt_cache)
prompt_cache = output.cache  # o guia lê `.past_key_values`; veja a próxima célula

answers = []
for question in QUESTIONS:
    new_inputs = tokenizer(SHOP + question, return_tensors="pt")
    past_key_values = copy.deepcopy(prompt_cache)
    out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS, do_sample=False)
    answers.append(out[0, new_inputs.input_ids.shape[-1]:])  # só os tokens novos

# %% [markdown]
# No transformers 5.24, a saída do forward chama seu campo de cache de `cache`. O `.past_key_values` do guia continua
# funcionando: é uma propriedade obsoleta (deprecated) que devolve o mesmo objeto (e registra um aviso no log uma
# única vez, silenciado acima).

# %%
# NBVAL_CHECK_OUTPUT
print(type(output).__name__, "campos:", list(output.keys()))
print("output.past_key_values is output.cache:", output.past_key_values is output.cache)
print(f"prefixo: {inputs.input_ids.shape[-1]} tokens; o cache pré-preenchido informa {prompt_cache.get_seq_length()}")
for question, new in zip(QUESTIONS, answers):
    print(f"{question.splitlines()[0]!r} -> {tokenizer.decode(new, skip_special_tokens=True)!r}")

# %% [markdown]
# Por que o pré-preenchimento roda dentro de `torch.no_grad()`: `generate` desliga os gradientes sozinho, uma chamada
# simples `model(...)` não. Os pesos do modelo exigem gradientes (são parâmetros treináveis), então, com os gradientes
# ligados, o autograd registra como cada chave e cada valor foi calculado: os tensores do cache viram nós de um grafo em
# vez de simples dados, e `copy.deepcopy` os recusa. O mesmo pré-preenchimento sem `torch.no_grad()`:

# %%
# NBVAL_CHECK_OUTPUT
print("gradientes ligados:", torch.is_grad_enabled(), "| os pesos exigem gradiente:", model.lm_head.weight.requires_grad)
grad_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
grad_cache = model(**inputs, past_key_values=grad_cache).cache  # sem torch.no_grad(): o autograd grava o pré-preenchimento
keys = grad_cache.layers[0].keys
print("keys.requires_grad:", keys.requires_grad, "| uma folha do grafo:", keys.is_leaf,
      "| criado por:", type(keys.grad_fn).__name__)
try:
    copy.deepcopy(grad_cache)
    print("copy.deepcopy funcionou")
except RuntimeError as error:
    print("copy.deepcopy levantou RuntimeError; a mensagem fala em folhas do grafo:", "(graph leaves)" in str(error))
with torch.no_grad():
    print("dentro de torch.no_grad(), keys.requires_grad:",
          model(**inputs, past_key_values=StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN))
          .cache.layers[0].keys.requires_grad)  # fmt: skip
del grad_cache, keys  # o grafo gravado guarda as ativações de todas as camadas

# %% [markdown]
# Cada chave e cada valor do cache é a saída de uma operação que o autograd registrou (`IndexCopyBackward0`: o
# StaticCache grava as suas posições com `index_copy_`, em `StaticLayer.update` de `transformers/cache_utils.py`,
# transformers 5.25), e o PyTorch só faz cópia profunda de tensores que um usuário criou, as folhas do grafo
# (`Tensor.__deepcopy__` em `torch/_tensor.py`, torch 2.13). A mensagem dele diz isso: "Only Tensors created
# explicitly by the user (graph leaves) support the deepcopy protocol at the moment" (só tensores criados
# explicitamente pelo usuário, as folhas do grafo, aceitam cópia profunda por enquanto). Dentro de `torch.no_grad()`
# nada é registrado: a última linha acima imprime `requires_grad` False para as chaves do mesmo pré-preenchimento,
# então o cache guarda tensores simples e a cópia profunda funciona.

# %% [markdown]
# **Preveja primeiro.** O SmolLM2 guarda, por token, 30 camadas × (chaves + valores) × 3 cabeças × 64 dimensões × 4
# bytes = 46.080 B (impresso junto com as pontuações abaixo). O `StaticCache` acima foi criado com `max_cache_len=224`
# e pré-preenchido com o prefixo de 160 tokens. Quantos bytes guarda cada cópia profunda dele? E uma cópia profunda de
# um `DynamicCache` pré-preenchido com o mesmo prefixo, no momento em que ela é feita?

# %%
guess_static_copy = None  # bytes que uma cópia profunda do StaticCache pré-preenchido guarda: seu palpite
guess_dynamic_copy = None  # bytes que uma cópia profunda do DynamicCache pré-preenchido guarda ao ser feita: seu palpite

# %% [markdown]
# ## 2. A mesma receita, observada
#
# O mesmo código outra vez, dentro de `kvlab.watch`, uma vez com o `StaticCache` do guia e outra com um `DynamicCache`
# (o comentário do guia diz que qualquer um dos dois serve). `watch.traces` lista todos os caches que o modelo usou:
# cada cache de prefixo pré-preenchido e, em seguida, um trace por cópia profunda, cujo `meta["copied_from"]` indica o
# trace do qual ela foi copiada. Como referência, cada pergunta também é respondida sem reutilização: um `generate` simples
# sobre o prompt inteiro.

# %%
reused = {}
with kvlab.watch(model) as watch:
    for name, prompt_cache in {"StaticCache": StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN),
                               "DynamicCache": DynamicCache(config=model.config)}.items():
        inputs = tokenizer(SHOP, return_tensors="pt")
        with torch.no_grad():
            prompt_cache = model(**inputs, past_key_values=prompt_cache).cache
        for question in QUESTIONS:
            new_inputs = tokenizer(SHOP + question, return_tensors="pt")
            past_key_values = copy.deepcopy(prompt_cache)
            out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS,
                                 do_sample=False)  # fmt: skip
            reused.setdefault(name, []).append(out[0, new_inputs.input_ids.shape[-1]:])

no_reuse, prompt_tokens = [], []
for question in QUESTIONS:
    new_inputs = tokenizer(SHOP + question, return_tensors="pt")
    out = model.generate(**new_inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    no_reuse.append(out[0, new_inputs.input_ids.shape[-1]:])
    prompt_tokens.append(new_inputs.input_ids.shape[-1])

# %%
# NBVAL_CHECK_OUTPUT
def print_trace(i, trace, label):
    summary = trace.summary()
    print(f"trace {i}: {trace.meta['cache_class']:<12} {label:<18} guarda {number(summary['final_bytes']):>10} B no "
          f"final, {summary['slots_live'] // 30} de {summary['slots_allocated'] // 30} posições por camada ocupadas")


for i, trace in enumerate(watch.traces):
    if trace.meta.get("copied_from") is None:
        print_trace(i, trace, label="prefixo pré-preenchido")
    else:
        print_trace(i, trace, label=f"cópia do trace {trace.meta['copied_from']}")
print("tokens do prompt por pergunta, sem reutilização:", prompt_tokens)
for name, outs in reused.items():
    print(f"{name}: mesmos tokens que sem reutilização: {[torch.equal(a, b) for a, b in zip(outs, no_reuse)]}; "
          f"mesmos que na seção 1 (sem watch): {[torch.equal(a, b) for a, b in zip(outs, answers)]}")

# %%
# NBVAL_CHECK_OUTPUT
static_copy = watch.traces[1]
dynamic_copy_bytes = cache_bytes(copy.deepcopy(prompt_cache))  # prompt_cache: o DynamicCache pré-preenchido do loop
print(f"por token, todas as 30 camadas: {number(static_copy.summary()['peak_bytes'] // MAX_CACHE_LEN)} B")
display(score(guess_static_copy, static_copy.summary()["peak_bytes"], unit=" B", kind="amount"))
display(score(guess_dynamic_copy, dynamic_copy_bytes, unit=" B", kind="amount"))

# %%
plot_prefix_copies(watch.traces, prompt_tokens,
                   title=f"{len(QUESTIONS)} perguntas depois de um prefixo de "
                         f"{watch.traces[0].summary()['slots_live'] // 30} tokens, {NEW_TOKENS} tokens novos cada")  # fmt: skip

# %% [markdown]
# Lendo os traces:
#
# - O primeiro forward de cada cópia escreveu apenas os tokens da pergunta (painel da esquerda): as chaves e os
#   valores do prefixo vieram junto com a cópia. Sem reutilização, cada resposta passa o prompt inteiro pelo modelo de novo.
# - Uma cópia de `StaticCache` guarda todas as `max_cache_len` posições desde o momento em que é copiada, preenchidas
#   ou não, então toda cópia custa as mesmas 224 posições. Uma cópia de `DynamicCache` guarda os tokens do prefixo e
#   só cresce enquanto sua resposta é gerada. Por pergunta, o preço da reutilização em memória é uma cópia viva enquanto
#   aquela resposta está sendo gerada.
# - Os tokens são os mesmos com e sem reutilização, e os mesmos com ou sem observação: as chaves e os valores do prefixo não
#   dependem do que vem depois dele, e `kvlab.watch` apenas registra.

# %% [markdown]
# ## 3. O que a reutilização economiza antes do primeiro token
#
# A seção 2 contou o trabalho: sem reutilização, o primeiro forward de cada resposta executa o prompt inteiro, prefixo e
# pergunta; com uma cópia, executa só os tokens da pergunta. O primeiro token novo sai desse primeiro forward, então
# as contagens preveem que uma cópia chega a ele mais cedo. Elas também dizem o que a reutilização custa: cada requisição
# faz uma cópia profunda do cache pré-preenchido, com todos os seus bytes, antes de `generate` começar. É uma cópia de
# memória, sem nenhuma conta do modelo, então esperamos que ela seja uma fração pequena do tempo com o prefixo; a
# execução abaixo mede essa fração. A previsão não é
# "mais rápido na proporção dos tokens": as duas chamadas também pagam o que não cresce com o prompt (preparar as
# entradas, os logits finais, escolher um token).
#
# Para medir o tempo, cada pergunta roda dos dois jeitos com `max_new_tokens=1`, de modo que cada chamada termina no
# seu primeiro token novo: o passo do guia (com o `copy.deepcopy` dentro da chamada cronometrada, já que um servidor
# paga por ele a cada requisição) e um `generate` simples sobre o prompt inteiro. A cópia profunda sozinha também é
# cronometrada. `time_first_token` executa cada chamada uma vez dentro de `kvlab.watch` para contar o seu
# pré-preenchimento e depois cronometra todas elas, repetidas e intercaladas. Cada tempo é impresso como a mediana das
# repetições com o seu intervalo interquartil (IQR: a metade central das repetições).

# %%
# Não verificado: os tempos dependem da máquina.
prompt_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
with torch.no_grad():
    prompt_cache = model(**tokenizer(SHOP, return_tensors="pt"), past_key_values=prompt_cache).cache
question_inputs = [tokenizer(SHOP + asked, return_tensors="pt") for asked in QUESTIONS]


def with_prefix(new_inputs):  # o passo do guia para cada pergunta, parado no primeiro token novo
    past_key_values = copy.deepcopy(prompt_cache)
    return model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=1, do_sample=False)


def without_prefix(new_inputs):  # sem reutilização: o generate pré-preenche o prompt inteiro num cache novo
    return model.generate(**new_inputs, max_new_tokens=1, do_sample=False)


def deep_copy_only():
    return copy.deepcopy(prompt_cache)


first_token = time_first_token(model, with_prefix, without_prefix, deep_copy_only, question_inputs, repeats=REPEATS,
                               labels=("deepcopy + generate", "generate, prompt inteiro", "só o deepcopy"))

# %%
# NBVAL_CHECK_OUTPUT
print("tokens pré-preenchidos por pergunta, deepcopy + generate:      ", first_token.prefilled_with_prefix)
print("tokens pré-preenchidos por pergunta, generate, prompt inteiro:", first_token.prefilled_without_prefix)
print(f"bytes que cada cópia profunda duplica: {number(first_token.copy_bytes)} B "
      f"(o StaticCache pré-preenchido guarda {number(cache_bytes(prompt_cache))} B)")

# %%
# Não verificado: os tempos dependem da máquina. Medianas de REPEATS execuções intercaladas com seu IQR; cada razão com seu
# intervalo de 95%.
print(f"{first_token.deep_copy.label}: {first_token.deep_copy.describe()}")
verdicts = []
for asked, reused, whole in zip(QUESTIONS, first_token.with_prefix, first_token.without_prefix):
    share = timing.compare(reused, first_token.deep_copy, warn=False)  # só deepcopy / deepcopy + generate
    verdicts.append(timing.compare(whole, reused, warn=False).verdict())
    print(asked.splitlines()[0])
    print(f"    {reused.label}: {reused.describe()} | {whole.label}: {whole.describe()}")
    print("   ", verdicts[-1])
    print(f"    a parte do deepcopy no tempo de {reused.label}: {number(100 * share.ratio)}% "
          f"({number(100 * share.low)}%-{number(100 * share.high)}%)")

# %%
# Não verificado: os tempos dependem da máquina. Sem reutilização primeiro, para manter a cor da seção 2; a caixa sob os
# painéis traz os vereditos impressos acima.
series = first_token.series()
plot_prefill_bars({name: series[name] for name in reversed(series)}, "pergunta", "tempo até o primeiro token (ms)",
                  f"{len(QUESTIONS)} perguntas depois do texto da loja, um "
                  f"token novo cada (tempos: mediana e IQR de {REPEATS})", verdicts=verdicts)  # fmt: skip

# %% [markdown]
# As contagens de tokens são exatas: com a cópia, o primeiro forward de cada pergunta executa só os tokens da pergunta;
# sem ela, o prompt inteiro. O veredito impresso para cada pergunta (e repetido no quadro sob a figura) diz, com o seu
# intervalo, se essa economia aparece no tempo até o primeiro token nesta máquina; um intervalo que contém 1 significa
# nenhuma diferença detectável, e "ruído demais para concluir" quer dizer que as repetições discordaram demais para
# decidir. A fração da cópia profunda é impressa ao lado, com o seu intervalo. O que a reutilização evita é a parte do
# prefixo em cada prompt: as contagens acima mostram os 160 tokens do prefixo poupados, de 171 a 176 por prompt.
#
# O que a cópia duplica é o `StaticCache` inteiro, 10.321.920 B: todas as 224 posições de `max_cache_len`,
# preenchidas ou não. Então os seus bytes acompanham `max_cache_len`, não o comprimento do prefixo. O tempo também os
# acompanha? O mesmo prefixo de 160 tokens, pré-preenchido em StaticCaches de 224, 896 e 3.584 posições, cada um
# copiado em profundidade, de forma intercalada:

# %%
sized = {}
for max_cache_len in (MAX_CACHE_LEN, 4 * MAX_CACHE_LEN, 16 * MAX_CACHE_LEN):
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        sized[max_cache_len] = model(**tokenizer(SHOP, return_tensors="pt"), past_key_values=cache).cache
copy_times = timing.time_interleaved({f"max_cache_len {number(n)}": lambda cache=cache: copy.deepcopy(cache)
                                      for n, cache in sized.items()}, repeats=REPEATS)  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
for max_cache_len, cache in sized.items():
    print(f"max_cache_len {number(max_cache_len)}: {cache.get_seq_length()} tokens "
          f"guardados, uma cópia profunda duplica {number(cache_bytes(cache)):>10} B")

# %%
# Não verificado: os tempos dependem da máquina.
smallest = copy_times[f"max_cache_len {number(MAX_CACHE_LEN)}"]
for label, each in copy_times.items():
    print(f"{label}: {each.describe()}")
for label, each in list(copy_times.items())[1:]:
    print(timing.compare(smallest, each, warn=False).verdict())

# %% [markdown]
# Os bytes quadruplicam a cada passo de `max_cache_len`, para os mesmos 160 tokens. O tempo cresce junto, mas não
# necessariamente na mesma proporção: ponha o fator de cada veredito, com o seu intervalo, ao lado de 4 e 16, os fatores
# dos bytes, para ver como os tempos desta execução os acompanham. Três tamanhos são poucos para separar o tempo de uma
# cópia em uma parte fixa e uma parte por byte, e por isso este notebook não faz essa separação; o que os vereditos
# mostram é a direção: quanto mais posições, mais demorada a cópia. Dimensione `max_cache_len` para a pergunta e a
# resposta mais longas, e não mais que isso: cada requisição paga por todas as posições.

# %% [markdown]
# ## 4. O próprio prefixo do guia, token a token
#
# O exemplo do guia (seção "Preencher um cache (cache de prefixo)", com o Llama-2) põe em cache
# `"You are a helpful assistant. "`, com um espaço no final, e depois tokeniza `INITIAL_PROMPT + prompt` para cada
# pergunta.
#
# O tokenizador do SmolLM2 é um BPE em nível de byte, o esquema do GPT-2, que escreve o espaço como `Ġ` (o
# `tokenizer.json` do modelo: modelo `BPE`, pré-tokenizador `ByteLevel`). O Llama-2 do guia e o Gemma 3, cujo
# tokenizador a célula abaixo também verifica, escrevem o espaço como `▁` (`LlamaTokenizer` em
# `transformers/models/llama/tokenization_llama.py` e `GemmaTokenizer` em
# `transformers/models/gemma/tokenization_gemma.py`, transformers 5.25).
#
# **Preveja primeiro.** Tokenizados junto com `"What is the capital of France?"`, os ids do prefixo do guia
# continuam sendo os primeiros ids do prompt completo (True ou False)?

# %%
guess_ids_line_up = None  # True se os ids do prefixo são os primeiros ids de prefixo + pergunta: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
INITIAL_PROMPT = "You are a helpful assistant. "
question = "What is the capital of France?"
check = token_prefix(tokenizer, INITIAL_PROMPT, question)
print("só o prefixo:        ", check.prefix_tokens)
print("prefixo + pergunta:  ", check.full_tokens[:len(check.prefix_tokens) + 2], "...")
print("os ids do prefixo são um prefixo dos ids completos:", check.ok, "| primeira diferença na posição", check.mismatch)
print(f"ids na posição {check.mismatch}: só o prefixo {check.prefix_ids[check.mismatch]}, "
      f"prefixo + pergunta {check.full_ids[check.mismatch]}")
_config, gemma_tokenizer = load_config_and_tokenizer("gemma3")  # um tokenizer no estilo SentencePiece, sem pesos
gemma_check = token_prefix(gemma_tokenizer, INITIAL_PROMPT, question)
print("Gemma 3, só o prefixo termina em:", gemma_check.prefix_tokens[-3:], "| prefixo + pergunta:",
      gemma_check.full_tokens[len(gemma_check.prefix_tokens) - 2:len(gemma_check.prefix_tokens) + 1])
print("Gemma 3: os ids do prefixo são um prefixo dos ids completos:", gemma_check.ok)

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_ids_line_up, check.ok, kind="choice"))

# %% [markdown]
# Sozinho, o prefixo termina em um token de espaço isolado, `Ġ` (o seu id está impresso acima). Junto com a
# pergunta, o mesmo espaço vem escrito dentro de `ĠWhat`; o tokenizer do Gemma 3 faz o mesmo com `▁` e `▁What`. O
# cache guarda 7 posições, então `generate` trata os primeiros 7 ids do prompt completo
# como já estando em cache e alimenta o modelo a partir da posição 7: `ĠWhat` nunca é executado, e a posição 6
# guarda, no lugar dele, as chaves e os valores de um espaço solto. O que isso faz com a resposta? A receita do guia,
# com o prefixo do guia:

# %%
prompt_cache = StaticCache(config=model.config, max_cache_len=64)
inputs_initial_prompt = tokenizer(INITIAL_PROMPT, return_tensors="pt")
with torch.no_grad():
    prompt_cache = model(**inputs_initial_prompt, past_key_values=prompt_cache).cache

new_inputs = tokenizer(INITIAL_PROMPT + question, return_tensors="pt")
past_key_values = copy.deepcopy(prompt_cache)
reused_out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS, do_sample=False)
fresh_out = model.generate(**new_inputs, max_new_tokens=NEW_TOKENS, do_sample=False)  # sem reutilização: a resposta certa

# %%
# NBVAL_CHECK_OUTPUT
start = new_inputs.input_ids.shape[-1]
print("cache de prefixo reutilizado:", repr(tokenizer.decode(reused_out[0, start:], skip_special_tokens=True)))
print("sem reutilização:            ", repr(tokenizer.decode(fresh_out[0, start:], skip_special_tokens=True)))
print("mesmos tokens:", torch.equal(reused_out[0, start:], fresh_out[0, start:]))

# %% [markdown]
# Nenhum erro, nenhum aviso, e uma resposta diferente: o cache reutilizado respondeu a um prompt que diz "You are a
# helpful assistant.␣ is the capital of France?" (o modelo nunca viu `ĠWhat`). Neste modelo pequeno, nenhuma das duas
# respostas diz "Paris" (o prompt não usa chat template, e o modelo é pequeno), mas só a resposta sem reutilização é a
# resposta do modelo ao prompt que você escreveu. A correção é terminar o prefixo em uma fronteira de token: tire o
# espaço do final e comece a pergunta com ele (`"You are a helpful assistant."` + `" What is…"`), ou termine o prefixo
# com uma quebra de linha, ou ponha em cache um turno inteiro do chat template.
#
# O `check_token_prefix` do kvlab compara os ids antes de você reutilizar um cache e diz onde eles se separam:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
check_token_prefix(check.prefix_ids, check.full_ids, tokenizer)

# %% [markdown]
# ### Experimente: quais prefixos são seguros?
#
# Escolha um prefixo e digite uma pergunta: a figura tokeniza o prefixo e o prefixo + pergunta com o tokenizer do
# SmolLM2 e alinha os ids em torno da emenda. As posições roxas coincidem (ali o cache pode ser reutilizado), as
# vermelhas diferem (ali o cache guardaria as chaves e os valores errados) e as cinza-claras são os tokens da própria
# pergunta, que o primeiro forward da cópia executa.

# %%
PREFIXES = {
    "'You are a helpful assistant. ' (o do guia)": "You are a helpful assistant. ",
    "'You are a helpful assistant.\\n'": "You are a helpful assistant.\n",
    "um turno de sistema do chat template": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
    "o texto da loja + 'Question: '": SHOP + "Question: ",
}


def prefix_check(prefix, question):
    return plot_token_prefix(token_prefix(tokenizer, prefix, question))


live(prefix_check,
     prefix=widgets.Dropdown(options=list(PREFIXES.items()), value=INITIAL_PROMPT, description="prefixo"),
     question=widgets.Text(value=question, continuous_update=False, description="pergunta"))

# %%
# NBVAL_CHECK_OUTPUT
for label, prefix in PREFIXES.items():
    each = token_prefix(tokenizer, prefix, question)
    if each.mismatch is None:  # o mismatch de token_prefix é None quando todos os ids do prefixo coincidem
        print(f"{label:<48} ids coincidem: {each.ok!s:<5} | nenhuma diferença")
    else:
        print(f"{label:<48} ids coincidem: {each.ok!s:<5} | primeira diferença na posição {each.mismatch}")

# %% [markdown]
# O padrão é o prefixo do guia: o quadrado vermelho na sua última posição é o espaço isolado. Para esta pergunta, o
# prefixo que termina em quebra de linha e o turno do chat template se alinham (todos os quadrados do prefixo ficam
# roxos), e o texto da loja terminado em `"Question: "` falha do mesmo jeito que o prefixo do guia, como mostra a
# tabela impressa acima. Digite outras perguntas para testá-las; a tabela vale para a pergunta digitada no código.

# %% [markdown]
# ## Principais conclusões
#
# - A receita do guia funciona com um prefixo que termina em uma fronteira de token (o texto da loja termina em uma
#   quebra de linha): pré-preencha um cache uma vez dentro de `torch.no_grad()` (com os gradientes ligados, os
#   tensores do cache pertencem ao grafo do autograd e `copy.deepcopy` os recusa), faça `copy.deepcopy` dele para cada
#   pergunta e passe a cópia com o prompt inteiro. Cada resposta executa apenas os tokens da sua pergunta, e os tokens
#   são iguais aos obtidos sem reutilização. Com o próprio prefixo do guia, que termina em espaço, a mesma receita muda a
#   resposta silenciosamente (seção 4). No transformers 5.24, o campo da saída do forward é `.cache`
#   (`.past_key_values` é um alias obsoleto dele).
# - Uma cópia de `StaticCache` custa todas as posições de `max_cache_len` (em bytes, e no tempo de copiá-las: a seção 3
#   mede três tamanhos); uma cópia de `DynamicCache` custa os tokens do prefixo e cresce com a sua resposta.
# - O que a reutilização economiza é pré-preenchimento: os tokens que cada requisição executa antes do seu primeiro
#   token novo (contagens exatas na seção 3). O veredito que a seção 3 imprime diz se isso encurta o tempo até o
#   primeiro token na sua máquina; cada requisição também paga um `copy.deepcopy` do cache de prefixo inteiro, cuja
#   fração é impressa lá.
# - Termine o prefixo em uma fronteira de token, nunca em um espaço: o próprio `"You are a helpful assistant. "` do
#   guia faz o SmolLM2 pular a primeira palavra da pergunta sem um único aviso. Confira os ids
#   (`kvlab.measure.prefix.check_token_prefix`) antes de reutilizar um cache.
#
# **A seguir:** [09 · Onde ficam os tensores](09_where_tensors_live.ipynb): o que `generate` mantém em cada dispositivo
# e o que cada chamada de forward recebe.
